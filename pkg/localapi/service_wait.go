package localapi

import (
	"context"
	"time"
)

// ServiceWaitMax bounds one wait inside the runner service, so that a
// waiting client never holds a service slot for long: the client asks
// again.
const ServiceWaitMax = 30 * time.Second

// ClientContext is done once the client of a call in the service has gone
// (service.Call.Gone) or the service stops; in local mode, and for MCP
// over HTTP, only when cancelled.
func (f *Env) ClientContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if f.Call == nil || f.Call.Socket == nil {
		return ctx, cancel
	}
	gone, stop := f.Call.Socket.Gone(), f.Call.Stop
	go func() {
		select {
		case <-gone:
			cancel()
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ServiceStopping reports whether the service serving f's call stops.
func (f *Env) ServiceStopping() bool {
	if f.Call == nil || f.Call.Stop == nil {
		return false
	}
	select {
	case <-f.Call.Stop:
		return true
	default:
		return false
	}
}

// ClientGone reports whether the client of a call in the service has gone.
func (f *Env) ClientGone() bool {
	if f.Call == nil || f.Call.Socket == nil {
		return false
	}
	select {
	case <-f.Call.Socket.Gone():
		return true
	default:
		return false
	}
}
