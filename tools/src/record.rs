//! `cannoli record`: placeholder.
