package dynamo

import (
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/prod-write/prod-write/pkg/awsconf"
)

// Error is a DynamoDB call that failed: the service could not be reached
// or did not answer in time, refused the credentials, throttled past the
// retry budget, or has no such table. The store fails closed on it: no
// Store method ever turns it into an answer.
//
// Its message never holds a credential: the SDK's errors do not carry
// secrets, and the message is scrubbed of the ones in use anyway.
type Error struct {
	Op    string // the DynamoDB operation, e.g. "PutItem"
	Table string
	Err   error
	msg   string
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.Err }

// TableMissing reports whether the table does not exist (prod-write store
// init creates it).
func (e *Error) TableMissing() bool {
	var api smithy.APIError
	return errors.As(e.Err, &api) && api.ErrorCode() == "ResourceNotFoundException"
}

func (s *Store) fail(op string, err error) error {
	msg := awsconf.Redact(s.creds, fmt.Sprintf("dynamodb table %q: %s: %s", s.table, op, awsconf.Short(err)))
	e := &Error{Op: op, Table: s.table, Err: err, msg: msg}
	if e.TableMissing() {
		e.msg += " (create it with `prod-write store init`)"
	}
	return e
}
