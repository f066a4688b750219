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

// ReceiptsConsistencyRequest is two checkpoint notes, as `receipts
// checkpoint --note` wrote them: Old of the earlier tree, New of the
// later one.
type ReceiptsConsistencyRequest struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// ReceiptsConsistencyResult is an RFC 6962 consistency proof of the tree
// of OldSize entries into that of NewSize (docs/adr/0044-journal-merkle-log.md),
// computed from a journal that holds both trees, once both notes verified
// under a runner key of the trust policy: verified alone with
// github.com/transparency-dev/merkle/proof.VerifyConsistency, or with
// `receipts consistency --verify`. Hashes are base64 in JSON.
type ReceiptsConsistencyResult struct {
	Origin  string   `json:"origin"`
	OldSize uint64   `json:"old_size"`
	NewSize uint64   `json:"new_size"`
	OldRoot []byte   `json:"old_root"`
	NewRoot []byte   `json:"new_root"`
	Hashes  [][]byte `json:"hashes"`
}
