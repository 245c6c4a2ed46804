// SPDX-License-Identifier: GPL-2.0-or-later
//! Where the library's lines about a run go: [`Notes`].
//!
//! The library never prints on stdout (that is the tool's). What it has to
//! say about a run (a stream cut short and what it lost, a connection
//! refused, a damaged chunk of a recording) is one line each, starting with
//! `cannoli:`, handed to the run's `Notes`: standard error unless the tool
//! gives its own (a log file, a test collecting them, a GUI), or nothing
//! for a second pass that said it all the first time. The totals in
//! [`Stats`](crate::Stats) count the same losses whatever the sink.

use std::fmt;
use std::sync::Arc;

/// A line sink for what the library says about a run. Cheap to clone.
#[derive(Clone)]
pub struct Notes(Sink);

#[derive(Clone)]
enum Sink {
    Stderr,
    Quiet,
    To(Arc<dyn Fn(&str) + Send + Sync>),
}

impl Notes {
    /// Each line to standard error (the default).
    pub fn stderr() -> Notes {
        Notes(Sink::Stderr)
    }

    /// Nothing said.
    pub fn quiet() -> Notes {
        Notes(Sink::Quiet)
    }

    /// Each line to `f`, without its newline; called from the run's
    /// threads, one line per call.
    pub fn to(f: impl Fn(&str) + Send + Sync + 'static) -> Notes {
        Notes(Sink::To(Arc::new(f)))
    }

    /// Says one line.
    pub fn say(&self, line: fmt::Arguments<'_>) {
        match &self.0 {
            Sink::Stderr => eprintln!("{line}"),
            Sink::Quiet => {}
            Sink::To(f) => f(&line.to_string()),
        }
    }
}

impl Default for Notes {
    fn default() -> Notes {
        Notes::stderr()
    }
}

impl fmt::Debug for Notes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Sink::Stderr => "Notes(stderr)",
            Sink::Quiet => "Notes(quiet)",
            Sink::To(_) => "Notes(fn)",
        })
    }
}

/// `note!(notes, "format", args..)`: one line to `notes`.
macro_rules! note {
    ($notes:expr, $($arg:tt)*) => {
        $crate::notes::Notes::say(&$notes, format_args!($($arg)*))
    };
}
pub(crate) use note;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_sink_gets_each_line_once_and_quiet_gets_none() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let n = Notes::to(move |l| g.lock().unwrap().push(l.to_string()));
        note!(n, "cannoli: pid {} lost {} events", 7, 3);
        note!(Notes::quiet(), "never");
        assert_eq!(*got.lock().unwrap(), ["cannoli: pid 7 lost 3 events"]);
    }
}
