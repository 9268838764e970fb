// Package contract is the one home of the JSON that crosses a process boundary between gpuhub's services: the
// producer of each answer encodes these types and every consumer decodes them, so a change to a producer that
// breaks a consumer is a compiler error, not a silent zero. Caller is the one client for calls between the
// services with a Hub token.
//
// The files follow the producers: usage.go (the usage API, gpu-usage), quota.go (gpu-quota). Each type names
// its endpoint; the services' openapi.yaml documents the same shapes for people, and openapi_test.go keeps the
// two equal. Answers that no Go code reads (those only the Hub glue, in Python, or the panel, in TypeScript,
// reads: admit, profiles, the culler's me and snooze) keep their one declaration beside their producer.
package contract

// Error is the JSON body of every error answer of every service: a message that tells the reader what to do
// next.
type Error struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}
