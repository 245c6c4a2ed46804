// SPDX-License-Identifier: GPL-2.0-or-later
//! Symbol names as a person reads them: C++'s (`_ZdlPvm` is `operator
//! delete(void*, unsigned long)`) and Rust's (`_ZN4core3ptr..17h..E` and
//! `_R...`), as memcheck shows them in its reports. Anything else, or a
//! name the demanglers refuse, is shown as it is.
//!
//! The names come from the guest's symbol tables, which anyone may have
//! written: a demangler's panic is caught, and a name whose demangled form
//! grows past [`MAX_LEN`] (nested templates can grow exponentially) is
//! shown mangled.

use std::borrow::Cow;

/// The longest demangled name shown; longer ones stay mangled.
pub const MAX_LEN: usize = 1024;

/// `name` demangled, or `name` itself.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return Cow::Borrowed(name);
    }
    let shown = std::panic::catch_unwind(|| {
        // Rust's legacy names are C++-like (`_ZN...E`) with a hash: its
        // own demangler knows them, and leaves the hash out with `{:#}`.
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
        let sym = cpp_demangle::Symbol::new(name).ok()?;
        sym.demangle(&cpp_demangle::DemangleOptions::default()).ok()
    });
    match shown {
        Ok(Some(d)) if !d.is_empty() && d.len() <= MAX_LEN => Cow::Owned(d),
        _ => Cow::Borrowed(name),
    }
}

/// The name a C++ or Rust programmer writes for the function mangled as
/// `name`: demangled without its parameters (`_ZN3geo3Box4areaEv` is
/// `geo::Box::area`), if `name` is a mangled one.
pub fn qualified_name(name: &str) -> Option<String> {
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return None;
    }
    let shown = std::panic::catch_unwind(|| {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
        let sym = cpp_demangle::Symbol::new(name).ok()?;
        let options = cpp_demangle::DemangleOptions::new().no_params();
        sym.demangle(&options).ok()
    });
    shown
        .ok()
        .flatten()
        .filter(|d| !d.is_empty() && d.len() <= MAX_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cxx_rust_and_c_names() {
        assert_eq!(demangle("_Znwm"), "operator new(unsigned long)");
        assert_eq!(demangle("_ZdlPvm"), "operator delete(void*, unsigned long)");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("malloc"), "malloc");
        assert_eq!(demangle("hb_uaf_read"), "hb_uaf_read");
        // Not a mangled name after all: as it is.
        assert_eq!(demangle("_Zzzz"), "_Zzzz");
        assert_eq!(demangle("_R"), "_R");
    }

    #[test]
    fn qualified_names() {
        assert_eq!(
            qualified_name("_ZN3geo3Box4areaEv").as_deref(),
            Some("geo::Box::area")
        );
        assert_eq!(qualified_name("_Z4areaii").as_deref(), Some("area"));
        assert_eq!(
            qualified_name("_ZN4core3ptr13drop_in_place17h0123456789abcdefE").as_deref(),
            Some("core::ptr::drop_in_place")
        );
        assert_eq!(qualified_name("area"), None);
        assert_eq!(qualified_name("_Zzzz"), None);
    }

    /// A name whose demangled form is too long to read stays mangled.
    #[test]
    fn a_name_too_long_stays_mangled() {
        // P<P<A, A>, P<A, A>>, nested eight deep: some 1,600 characters.
        let mut arg = String::from("1A");
        for _ in 0..8 {
            arg = format!("1PI{arg}{arg}E");
        }
        let name = format!("_Z1f{arg}");
        assert!(cpp_demangle::Symbol::new(name.as_str()).is_ok());
        assert_eq!(demangle(&name), name);
        let mut arg = String::from("1A");
        for _ in 0..3 {
            arg = format!("1PI{arg}{arg}E");
        }
        assert!(demangle(&format!("_Z1f{arg}")).starts_with("f(P<P<P<A, A>"));
    }
}
