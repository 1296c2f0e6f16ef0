package inbox

// WithLineSavepoint names the savepoint the inbox keeps around each line, for a test that plays a
// handler that knows the name (none can learn it otherwise).
func WithLineSavepoint(name string) Option {
	return func(c *config) error {
		c.savepoint = name
		return nil
	}
}

// SavepointPrefix is how the name drawn for each transaction begins.
const SavepointPrefix = savepointPrefix
