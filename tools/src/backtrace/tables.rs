// SPDX-License-Identifier: GPL-2.0-or-later
//! The symbol tables of a run, one per guest executable and one per mapped
//! library, read once and shared by the processes that run them.

use std::path::Path;
use std::sync::Arc;

use super::run::Run;
use super::symbols::Functions;

pub(super) fn table_for(run: &Run, exe: Option<&Path>) -> Arc<Functions> {
    let mut tables = run.tables.lock().unwrap();
    let key = exe.map(Path::to_path_buf);
    if let Some(t) = tables.get(&key) {
        return t.clone();
    }
    let t = match exe {
        Some(p) => match Functions::from_elf(p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!(
                    "backtrace: {}; functions are named by address",
                    cannoli::wire::escape(&e.to_string())
                );
                Functions::default()
            }
        },
        None => {
            eprintln!(
                "backtrace: QEMU did not say which program runs and no --binary was given; \
                 functions are named by address"
            );
            Functions::default()
        }
    };
    let t = Arc::new(shown(run, t));
    tables.insert(key, t.clone());
    t
}

/// The functions of a shared library (or of any ELF file the guest maps
/// executable), `None` if it cannot be read.
pub(super) fn library_table(run: &Run, path: &str) -> Option<Arc<Functions>> {
    let mut libs = run.libs.lock().unwrap();
    libs.entry(path.to_string())
        .or_insert_with(|| {
            let t = Functions::from_elf(Path::new(path)).ok()?;
            Some(Arc::new(shown(run, t)))
        })
        .clone()
}

/// `t` with its names as the run shows them.
fn shown(run: &Run, t: Functions) -> Functions {
    if run.demangle {
        t.demangled()
    } else {
        t
    }
}
