package githubbridge

// RefusalMark is refusalMark, for the external tests.
func (p *Poller) RefusalMark(what string, id int64) string { return p.refusalMark(what, id) }

// Hold marks review id as being judged elsewhere (a webhook delivery in
// flight) until release, which leaves it unjudged, as a delivery whose
// answer could not be stored does.
func (p *Poller) Hold(id int64) (release func()) {
	k := itemKey{review: true, id: id}
	p.mu.Lock()
	p.init()
	p.busy[k] = true
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.busy, k)
		p.mu.Unlock()
	}
}
