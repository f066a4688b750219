package localapi

// PolicyReplaced is closed once the runner service replaces the policy
// and registry f's call judges by (a reload); nil outside the service.
func (f *Env) PolicyReplaced() <-chan struct{} {
	if f.Call == nil {
		return nil
	}
	return f.Call.State.Current().Replaced
}
