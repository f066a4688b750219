package localapi

// IsOperator reports whether f's caller is the service's operator: in
// this process (local mode: whoever can write the state directory, or
// the service's own calls), or a service call's caller that is
// (servicecall.Call.IsOperator). MCP over HTTP's callers are principals, not
// operators.
func (f *Env) IsOperator() bool {
	if f.Call == nil {
		return true
	}
	return f.Call.Socket != nil && f.Call.IsOperator()
}

// MayReadPlans reports whether f's caller may read what plans bind: in
// this process (local mode, or the service's own calls and MCP over
// HTTP's, whose callers are principals), or a service call's caller that
// may (servicecall.Call.MayReadPlans).
func (f *Env) MayReadPlans() bool {
	return f.Call == nil || f.Call.Socket == nil || f.Call.MayReadPlans()
}

// PolicyReplaced is closed once the runner service replaces the policy
// and registry f's call judges by (a reload); nil outside the service.
func (f *Env) PolicyReplaced() <-chan struct{} {
	if f.Call == nil {
		return nil
	}
	return f.Call.State.Current().Replaced
}
