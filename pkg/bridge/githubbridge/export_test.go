package githubbridge

// RefusalMark is refusalMark, for the external tests.
func (p *Poller) RefusalMark(what string, id int64) string { return p.refusalMark(what, id) }
