// SPDX-License-Identifier: GPL-2.0-or-later
//! Symbol tables, one per guest executable, shared by the processes running
//! it: read (with `--symbols` and `--base`) when the first process of a
//! program starts.

use std::path::PathBuf;
use std::sync::Arc;

use super::run::Run;
use super::symbols::Symbols;

/// The table for a process whose executable is `exe` (when no `--binary`).
pub(super) fn table_for(run: &Run, exe: Option<&str>) -> Arc<Symbols> {
    let o = &run.settings;
    let path = o.binary.clone().or_else(|| exe.map(PathBuf::from));
    let mut tables = run.tables.lock().unwrap();
    if let Some(t) = tables.get(&path) {
        return t.clone();
    }
    let mut t = match &path {
        Some(p) => match Symbols::from_elf(p, o.base) {
            Ok(t) => {
                if t.pie && o.base == 0 {
                    eprintln!(
                        "symbolizer: {} is position independent; pass --base ADDR with its load address \
                         or the symbols will not match",
                        cannoli::wire::escape(&p.display().to_string())
                    );
                }
                t
            }
            Err(e) => {
                let e = e.to_string();
                eprintln!(
                    "symbolizer: {}; printing bare addresses",
                    cannoli::wire::escape(&e)
                );
                Symbols::default()
            }
        },
        None => Symbols::default(),
    };
    if let Some(nm) = &o.symbols {
        match std::fs::read_to_string(nm) {
            Ok(text) => t = t.merge(Symbols::from_nm(&text, o.base)),
            Err(e) => eprintln!("symbolizer: cannot read {}: {e}", nm.display()),
        }
    }
    if !t.is_empty() {
        let from: Vec<String> = path
            .iter()
            .chain(o.symbols.iter())
            .map(|p| cannoli::wire::escape(&p.display().to_string()).into_owned())
            .collect();
        eprintln!(
            "symbolizer: {} symbols from {}",
            t.len(),
            from.join(" and ")
        );
    }
    if t.is_empty() && path.is_none() && o.symbols.is_none() {
        eprintln!("symbolizer: QEMU did not say which program runs and no --binary was given; printing bare addresses");
    }
    if o.demangle {
        t = t.demangled();
    }
    let t = Arc::new(t);
    tables.insert(path, t.clone());
    t
}
