//! Placeholder: being moved here from examples/coverage.
