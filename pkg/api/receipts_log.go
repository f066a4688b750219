package api

// ReceiptsProveRequest names a receipt by its sequence number, and the
// tree it is proved in: the first Size entries of the journal (0: all of
// them, the head).
type ReceiptsProveRequest struct {
	Seq  uint64 `json:"seq"`
	Size uint64 `json:"size,omitempty"`
}

// ReceiptsProveResult is an RFC 6962 inclusion proof of one receipt's
// journal line in the journal's Merkle tree (docs/adr/0044-journal-merkle-log.md),
// with the C2SP checkpoint note, signed by the runner key, of the tree it
// is proved in: verified alone with golang.org/x/mod/sumdb/note and
// github.com/transparency-dev/merkle/proof.VerifyInclusion. Hashes are
// base64 in JSON, as in a checkpoint.
type ReceiptsProveResult struct {
	Origin     string   `json:"origin"`
	Seq        uint64   `json:"seq"`
	LeafIndex  uint64   `json:"leaf_index"`
	TreeSize   uint64   `json:"tree_size"`
	RootHash   []byte   `json:"root_hash"`
	LineHash   string   `json:"line_hash"`
	LeafHash   []byte   `json:"leaf_hash"`
	Hashes     [][]byte `json:"hashes"`
	Checkpoint string   `json:"checkpoint"`
}
