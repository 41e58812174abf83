package algorithms

// The indexes into core.State.Vals that the external tests read.
const (
	GCRAPerMicro = gcraPerMicro
	LogCost      = logCost
	LogFirst     = logFirst
)
