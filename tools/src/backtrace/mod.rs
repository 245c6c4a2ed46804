//! Placeholder: being moved here from examples/backtrace.
