// SPDX-License-Identifier: GPL-2.0-or-later
//! A tool's output (its trace on stdout or in a file, a drcov file, ...)
//! that remembers whether writing it failed.
//!
//! Why one type for every tool: a full disk or a dead NFS server must not
//! leave a truncated trace behind a tool that exits with the program's
//! status as if all went well. But a tool cannot simply stop at the first
//! failed write either: QEMU blocks once the ring is full, so the tool has
//! to keep draining events until the program ends. [`Output`] therefore
//! works like C's stdio: the first error is kept, later writes are
//! discarded (and [`Output::is_writing`] tells the tool to skip the work of
//! formatting them), and [`Output::finish`] flushes, closes and hands the
//! error back; [`crate::Report::finish_with_output`] turns it into one line
//! and [`cannoli::EXIT_INCOMPLETE`].
//!
//! A reader that goes away (`EPIPE`: `tool ... | head`) is not a failure:
//! the user asked for less, and the tool stops writing quietly, as `cat`
//! killed by SIGPIPE does in a pipeline.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::path::Path;

/// Buffer size: big writes, few system calls.
const BUFFER: usize = 1 << 16;

enum Sink {
    Stdout(io::Stdout),
    Stderr(io::Stderr),
    File(File),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::Stderr(s) => s.write(buf),
            Sink::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::Stderr(s) => s.flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

/// Buffered output that keeps its first error (see the module).
pub struct Output {
    w: BufWriter<Sink>,
    /// What is written, for the message: "the trace", "the drcov file".
    what: String,
    /// Where: "stdout" or the file's path.
    dest: String,
    error: Option<io::Error>,
    /// The reader closed the pipe.
    reader_gone: bool,
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Output")
            .field("what", &self.what)
            .field("dest", &self.dest)
            .field("error", &self.error)
            .field("reader_gone", &self.reader_gone)
            .finish()
    }
}

impl Output {
    /// `what` (e.g. "the trace") goes to stdout.
    pub fn stdout(what: &str) -> Output {
        Output::new(Sink::Stdout(io::stdout()), what, "stdout".into())
    }

    /// `what` (e.g. a checker's findings) goes to stderr, beside the
    /// program's own stderr.
    pub fn stderr(what: &str) -> Output {
        Output::new(Sink::Stderr(io::stderr()), what, "stderr".into())
    }

    /// `what` goes to the file `path`, created (or truncated) now, so that
    /// a bad path fails before the program runs.
    pub fn create(path: &Path, what: &str) -> Result<Output, OpenError> {
        match File::create(path) {
            Ok(f) => Ok(Output::new(Sink::File(f), what, path.display().to_string())),
            Err(source) => Err(OpenError {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// [`Output::create`] for `Some(path)` (a tool's `-o FILE`), else
    /// `default` ([`Output::stdout`] or [`Output::stderr`]).
    pub fn create_or(
        path: Option<&Path>,
        what: &str,
        default: fn(&str) -> Output,
    ) -> Result<Output, OpenError> {
        match path {
            None => Ok(default(what)),
            Some(p) => Output::create(p, what),
        }
    }

    fn new(sink: Sink, what: &str, dest: String) -> Output {
        Output {
            w: BufWriter::with_capacity(BUFFER, sink),
            what: what.to_string(),
            dest,
            error: None,
            reader_gone: false,
        }
    }

    /// Whether writes still go anywhere: false after an error or once the
    /// reader closed the pipe. A tool checks this to skip formatting.
    pub fn is_writing(&self) -> bool {
        self.error.is_none() && !self.reader_gone
    }

    /// The reader closed the pipe (not an error; see the module).
    pub fn reader_gone(&self) -> bool {
        self.reader_gone
    }

    /// Where the output goes: "stdout" or the file's path.
    pub fn dest(&self) -> &str {
        &self.dest
    }

    /// Keeps `e` unless an earlier error is kept already.
    fn fail(&mut self, e: io::Error) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.reader_gone = true;
        } else if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Flushes and closes the output (a file's `close`, for stdout the
    /// `close` of a duplicate: where the data goes through a file system
    /// that reports errors late, such as NFS, they show there), and returns
    /// the first error of the whole run.
    pub fn finish(self) -> Result<(), OutputError> {
        let Output {
            mut w,
            what,
            dest,
            mut error,
            reader_gone,
        } = self;
        if error.is_none() && !reader_gone {
            if let Err(e) = w.flush() {
                if e.kind() != io::ErrorKind::BrokenPipe {
                    error = Some(e);
                }
            }
        }
        // What is still buffered after a failure is dropped: the output is
        // incomplete anyway, and writing it again would fail again.
        let (sink, _unwritten) = w.into_parts();
        let closed = match sink {
            Sink::File(f) => close(f.into_raw_fd()),
            // Stderr stays open for the last lines of the tool.
            Sink::Stderr(_) => Ok(()),
            Sink::Stdout(s) => {
                // SAFETY: dup of an fd we do not own leaves it open; the
                // duplicate is ours to close.
                let fd = unsafe { libc::dup(s.as_raw_fd()) };
                if fd < 0 {
                    Ok(())
                } else {
                    close(fd)
                }
            }
        };
        if let (None, Err(e)) = (&error, closed) {
            if !reader_gone && e.kind() != io::ErrorKind::BrokenPipe {
                error = Some(e);
            }
        }
        match error {
            None => Ok(()),
            Some(error) => Err(OutputError { what, dest, error }),
        }
    }
}

/// How long a line a live run wrote may wait in an output's buffer (see
/// [`flushing_while`]).
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `run`, calling `flush` every [`FLUSH_EVERY`] meanwhile (on a
/// thread of its own) when `live`: a live trace is read as the program
/// runs (a server's request, traced, then a wait for the next), so a line
/// must not sit in the buffer until the program ends. The hook library
/// hands a thread's events over before it sleeps in a syscall, so the
/// buffer is the last place a line could wait. `flush` takes the output's
/// lock and flushes it ([`Output::flush`]).
pub fn flushing_while<R>(live: bool, flush: impl Fn() + Send, run: impl FnOnce() -> R) -> R {
    if !live {
        return run();
    }
    std::thread::scope(|s| {
        let (stop, ticks) = std::sync::mpsc::channel::<()>();
        s.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                ticks.recv_timeout(FLUSH_EVERY)
            {
                flush();
            }
        });
        let r = run();
        drop(stop);
        r
    })
}

/// `close(fd)`, whose error (EIO, ENOSPC, EDQUOT on NFS) means data was
/// lost. EINTR is not one: Linux has released the fd and the data is
/// written either way.
fn close(fd: i32) -> io::Result<()> {
    // SAFETY: fd is ours (from into_raw_fd or dup) and closed once.
    if unsafe { libc::close(fd) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        Ok(())
    } else {
        Err(e)
    }
}

impl Write for Output {
    /// Never fails (but for EINTR, which `write_all` retries): an error is
    /// kept for [`Output::finish`] and the data is dropped, as is all data
    /// after it.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.is_writing() {
            return Ok(buf.len());
        }
        match self.w.write(buf) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                self.fail(e);
                Ok(buf.len())
            }
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if !self.is_writing() {
            return Ok(());
        }
        // BufWriter's own write_all retries EINTR.
        if let Err(e) = self.w.write_all(buf) {
            self.fail(e);
        }
        Ok(())
    }

    /// Flushes now (a line that must be seen at once); errors are kept like
    /// a write's.
    fn flush(&mut self) -> io::Result<()> {
        if self.is_writing() {
            if let Err(e) = self.w.flush() {
                self.fail(e);
            }
        }
        Ok(())
    }
}

/// The output file could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {path}: {source}")]
pub struct OpenError {
    /// The file, as given.
    pub path: String,
    /// Why it could not be created.
    pub source: io::Error,
}

/// Writing an [`Output`] failed: what is there is incomplete.
#[derive(Debug, thiserror::Error)]
#[error("writing {what} to {dest} failed: {error}; the output is incomplete")]
pub struct OutputError {
    /// "the trace", "the drcov file", ...
    pub what: String,
    /// "stdout" or the file's path.
    pub dest: String,
    /// What the write failed with.
    #[source]
    pub error: io::Error,
}

impl OutputError {
    /// Says so in one line on stderr (`tool: writing ... failed: ...; the
    /// output is incomplete`) and returns [`cannoli::EXIT_INCOMPLETE`].
    pub fn report(&self, tool: &str) -> i32 {
        eprintln!("{tool}: {self}");
        cannoli::EXIT_INCOMPLETE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live run's output is flushed while the run goes on: the run here
    /// waits for the first flush (a count, not a time), and a replay's is
    /// never flushed by the ticker.
    #[test]
    fn live_runs_are_flushed_while_they_run() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let flushes = AtomicU64::new(0);
        let flush = || {
            flushes.fetch_add(1, Ordering::SeqCst);
        };
        let r = flushing_while(true, flush, || {
            // A bound on a hang only.
            for _ in 0..30_000 {
                if flushes.load(Ordering::SeqCst) > 0 {
                    return 42;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            0
        });
        assert_eq!(r, 42, "no flush while the run went on");
        let before = flushes.load(Ordering::SeqCst);
        let r = flushing_while(false, || panic!("a replay flushed"), || 7);
        assert_eq!(r, 7);
        assert_eq!(
            flushes.load(Ordering::SeqCst),
            before,
            "the ticker outlived its run"
        );
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("launch-output-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_full_disk_is_kept_and_reported() {
        let mut o = Output::create(Path::new("/dev/full"), "the trace").unwrap();
        // Small writes stay in the buffer; the error shows at the flush.
        writeln!(o, "one line").unwrap();
        assert!(o.is_writing());
        let e = o.finish().unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::ENOSPC));
        let line = e.to_string();
        assert!(
            line.starts_with("writing the trace to /dev/full failed: ")
                && line.ends_with("; the output is incomplete"),
            "{line}"
        );
    }

    #[test]
    fn the_first_error_stops_writing() {
        let mut o = Output::create(Path::new("/dev/full"), "the trace").unwrap();
        // More than the buffer: written through, and fails at once.
        o.write_all(&vec![b'x'; 2 * BUFFER]).unwrap();
        assert!(!o.is_writing());
        o.write_all(b"discarded").unwrap();
        assert!(o.finish().is_err());
    }

    #[test]
    fn a_good_file_is_complete() {
        let p = temp("good");
        let mut o = Output::create(&p, "the trace").unwrap();
        for i in 0..100_000 {
            writeln!(o, "line {i}").unwrap();
        }
        o.finish().unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(text.lines().count(), 100_000);
        assert_eq!(text.lines().last(), Some("line 99999"));
    }

    #[test]
    fn a_closed_pipe_is_no_error() {
        let mut fds = [0; 2];
        // SAFETY: plain pipe(2) into a local array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both fds are fresh and owned here.
        let (r, w) = unsafe {
            use std::os::fd::FromRawFd;
            (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1]))
        };
        drop(r);
        let mut o = Output::new(Sink::File(w), "the trace", "a pipe".into());
        o.write_all(&vec![b'x'; 2 * BUFFER]).unwrap();
        assert!(o.reader_gone() && !o.is_writing());
        o.finish().unwrap();
    }

    #[test]
    fn a_bad_path_names_itself() {
        let e = Output::create(Path::new("/nonexistent/dir/out"), "the trace").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot create /nonexistent/dir/out: "),
            "{e}"
        );
    }
}
