//! `cannoli info`: placeholder.
