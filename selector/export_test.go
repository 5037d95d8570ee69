package selector

// Hooks for the external conformance test (conformance_test.go): the
// variants of cswlc and prequal it runs need options that New does not
// take.

type (
	CSWLCOptions   = cswlcOptions
	PrequalOptions = prequalOptions
)

func NewCSWLC(opt CSWLCOptions) Strategy     { return newCSWLC(opt) }
func NewPrequal(opt PrequalOptions) Strategy { return newPrequal(opt) }
