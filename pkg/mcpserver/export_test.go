package mcpserver

// LoadTokens loads the tokens file at path as the service does at its
// start ([OpenTokensFile]) and returns its tokens.
func LoadTokens(path string) (*Tokens, error) {
	f, err := OpenTokensFile(path, nil)
	if err != nil {
		return nil, err
	}
	return f.cur, nil
}

// ParseTokens decodes a tokens file's bytes as the service's start does
// (parseTokens: a file without a token is refused), but reads no
// introspection client's secret.
func ParseTokens(name string, data []byte) (*Tokens, error) {
	return parseTokens(name, data, false)
}
