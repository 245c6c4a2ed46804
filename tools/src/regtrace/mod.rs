//! Placeholder: being moved here from examples/regtrace.
