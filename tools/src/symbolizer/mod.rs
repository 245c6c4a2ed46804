//! Placeholder: being moved here from examples/symbolizer.
