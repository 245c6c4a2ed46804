// SPDX-License-Identifier: GPL-2.0-or-later
//! The launcher: a tool's run, from the program's command line to its
//! exit status, with QEMU started under the guardian and served by the
//! tool (or recorded).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cannoli::{Cannoli, Server, Stats};

use crate::rundir::RunDir;
use crate::{arch, find, guard, signals, tree, Error, OutputError};

/// What a tool tells the launcher about itself.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The hook library's name: `lib<hooks>.so` next to the executable
    /// (a name with a `/` or ending in `.so` is a path).
    pub hooks: &'a str,
    /// Worker threads per traced guest thread (at least 1).
    pub threads: usize,
}

/// Runs the tool: classic mode if `args` is empty, else launches `args` =
/// `PROGRAM [ARGS...]` under the patched QEMU. Returns the exit status the
/// tool should exit with: the program's in launch mode, 0 in classic mode.
pub fn run<T: Cannoli>(
    opts: Options<'_>,
    args: impl IntoIterator<Item = impl Into<OsString>>,
) -> Result<i32, Error> {
    Launcher::new(opts)
        .run::<T>(args)
        .map(|r| r.finish(opts_tool_name()))
}

/// The name `run` gives its one line about an incomplete trace.
fn opts_tool_name() -> &'static str {
    "cannoli"
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Report {
    /// Launch mode: the program's exit status, 128 + N if it died of signal
    /// N. Classic mode: 0.
    pub status: i32,
    /// Whether `status` is the program's (launch mode, or a replay of a
    /// recording that has it), not a stand-in.
    pub status_known: bool,
    /// QEMU's wait status (launch mode).
    pub exit: Option<ExitStatus>,
    /// The server's totals.
    pub stats: Stats,
}

impl Report {
    /// The status a tool exits with: [`cannoli::EXIT_INCOMPLETE`] when
    /// events are missing (its output cannot be trusted, whatever the
    /// program did), else the program's own status.
    pub fn exit_code(&self) -> i32 {
        if self.stats.is_complete() {
            self.status
        } else {
            cannoli::EXIT_INCOMPLETE
        }
    }

    /// Says on stderr, in one line starting with `tool:`, what was lost if
    /// the trace is incomplete, and returns [`Report::exit_code`].
    pub fn finish(&self, tool: &str) -> i32 {
        if !self.stats.is_complete() {
            let program = if self.status_known {
                format!(" (the program's was {})", self.status)
            } else {
                String::new()
            };
            eprintln!(
                "{tool}: the trace is incomplete ({}); exiting with status {}{program}",
                self.stats.loss_summary(),
                cannoli::EXIT_INCOMPLETE,
            );
        }
        self.exit_code()
    }

    /// [`Report::finish`], and then the tool's output: if writing it
    /// failed, one more line (`tool: writing ... failed: ...; the output is
    /// incomplete`) and [`cannoli::EXIT_INCOMPLETE`], whatever the program's
    /// status, as for lost events: a script must not take a truncated trace
    /// for a whole one.
    pub fn finish_with_output(&self, tool: &str, output: Result<(), OutputError>) -> i32 {
        let code = self.finish(tool);
        match output {
            Ok(()) => code,
            Err(e) => e.report(tool),
        }
    }
}

/// [`run`] with more control.
#[derive(Debug, Clone)]
pub struct Launcher {
    hooks: String,
    threads: usize,
    listen: Option<String>,
    qemu_args: Vec<OsString>,
    /// Variables QEMU is started with, for its hook library.
    qemu_env: Vec<(OsString, OsString)>,
    name: String,
    announce: bool,
    /// The tool's value for the run (see [`Launcher::state`]).
    state: cannoli::ToolState,
}

impl Launcher {
    /// A launcher with `opts`; nothing is looked up or started until it runs.
    pub fn new(opts: Options<'_>) -> Launcher {
        Launcher {
            hooks: opts.hooks.to_string(),
            threads: opts.threads.max(1),
            listen: None,
            qemu_args: Vec::new(),
            qemu_env: Vec::new(),
            name: tool_name(),
            announce: true,
            state: cannoli::ToolState::default(),
        }
    }

    /// Listen here: in classic mode instead of `$CANNOLI_ADDR`, in launch
    /// mode instead of a private Unix socket (`HOST:PORT` for TCP).
    pub fn listen(mut self, addr: impl Into<String>) -> Launcher {
        self.listen = Some(addr.into());
        self
    }

    /// Launch mode: one more QEMU option, after `$CANNOLI_QEMU_ARGS`.
    pub fn qemu_arg(mut self, arg: impl Into<OsString>) -> Launcher {
        self.qemu_args.push(arg.into());
        self
    }

    /// Launch mode: a variable in QEMU's environment (a hook library's
    /// configuration: QEMU hides `CANNOLI_*` variables from the guest).
    /// Only the QEMU of this run gets it, not this process: two runs in one
    /// process each give theirs their own.
    pub fn qemu_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Launcher {
        self.qemu_env.push((key.into(), value.into()));
        self
    }

    /// Classic mode prints `<name>: listening on ADDR; now start QEMU ...`
    /// on stderr (default: yes).
    pub fn announce(mut self, yes: bool) -> Launcher {
        self.announce = yes;
        self
    }

    /// Starts the run, live or replayed, with `state` in every stream's
    /// `ClientInfo` ([`cannoli::ClientInfo::state`]): the tool's
    /// configuration and run-wide results, which it keeps its own clone of
    /// to read after the run.
    pub fn state(mut self, state: impl Into<cannoli::ToolState>) -> Launcher {
        self.state = state.into();
        self
    }

    /// Replays the recording at `path` (made by `cannoli record`) through
    /// `T` instead of tracing a program: the same callbacks, contexts and
    /// order as the live run had. `needs` is what the tool needs the
    /// recording to hold; a recording without it is one clear error. The
    /// report's status is the recorded program's.
    pub fn replay<T: Cannoli>(
        self,
        path: &std::path::Path,
        needs: cannoli::recording::Needs,
    ) -> Result<Report, Error> {
        let rec = cannoli::Recording::open(path).map_err(|e| Error::Recording(e.to_string()))?;
        needs
            .check(rec.hooks())
            .map_err(|m| Error::Recording(format!("{}: {m}", path.display())))?;
        drop(rec);
        let r = cannoli::replay_with::<T>(path, self.threads, self.state)
            .map_err(|e| Error::Recording(e.to_string()))?;
        Ok(Report {
            // Unknown (QEMU started by hand) as in classic mode; a cut
            // recording is incomplete, which decides the exit status.
            status: r.status.unwrap_or(0),
            status_known: r.status.is_some(),
            exit: None,
            stats: r.stats,
        })
    }

    /// Classic mode if `args` is empty, else launch mode.
    pub fn run<T: Cannoli>(
        self,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Result<Report, Error> {
        let mut args = args.into_iter().map(Into::into);
        match args.next() {
            None => self.classic::<T>(),
            Some(program) => self.launch::<T>(program, args.collect()),
        }
    }

    fn classic<T: Cannoli>(self) -> Result<Report, Error> {
        let addr = self.listen.clone().unwrap_or_else(cannoli::default_addr);
        let server = cannoli::bind_by_hand_at(&addr)
            .map_err(Error::Listen)?
            .with_state(self.state.clone());
        if self.announce {
            let lib = find::find_hooks(&self.hooks)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| find::hooks_file(&self.hooks));
            eprintln!(
                "{}: listening on {}; now start QEMU with -cannoli {lib}",
                self.name,
                server.addr()
            );
        }
        let stats = server.run::<T>(self.threads).map_err(Error::Server)?;
        Ok(Report {
            status: 0,
            status_known: false,
            exit: None,
            stats,
        })
    }

    /// The QEMU command line for `program` (resolved), without running it.
    pub fn command(&self, program: &OsString, args: &[OsString]) -> Result<Command, Error> {
        let mut cmd = self.qemu_command(program, args)?;
        signals::grow_fd_table(&mut cmd);
        Ok(cmd)
    }

    /// [`Launcher::command`] without anything to run before QEMU's exec.
    fn qemu_command(&self, program: &OsString, args: &[OsString]) -> Result<Command, Error> {
        let path = find::resolve_program(program)?;
        let guest = arch::inspect(&path)?;
        let qemu = find::find_qemu(guest.arch)?;
        let hooks = find::find_hooks(&self.hooks)?;
        let mut qemu_args = find::env_qemu_args();
        qemu_args.extend(self.qemu_args.iter().cloned());
        let sysroot = find::find_sysroot(&guest, &qemu_args)?;
        let mut cmd = Command::new(&qemu);
        cmd.args(&qemu_args);
        if let Some(root) = sysroot {
            cmd.arg("-L").arg(root);
        }
        cmd.arg("-cannoli").arg(hooks).arg(&path).args(args);
        cmd.envs(self.qemu_env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }

    fn launch<T: Cannoli>(self, program: OsString, args: Vec<OsString>) -> Result<Report, Error> {
        let threads = self.threads;
        let tee = match std::env::var_os(RECORD_TO_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Some(Arc::new(tee_writer(path.as_ref(), &program, &args)?)),
            None => None,
        };
        let writer = tee.clone();
        let state = self.state.clone();
        let report = self.launch_serving(
            program,
            args,
            Box::new(move |server, done| {
                let server = match writer {
                    Some(w) => server.tee(w),
                    None => server,
                }
                .with_state(state);
                server.run_until::<T>(threads, done)
            }),
        )?;
        if let Some(w) = tee {
            let st = &report.stats;
            let exit = cannoli::recording::Exit {
                status: Some(report.status),
                refused_connections: st.refused_connections,
                missing_processes: st.missing_processes,
                strangers: st.strangers,
                end_ns: w.now_ns(),
            };
            w.finish(&exit).map_err(|e| {
                Error::Recording(format!(
                    "writing the recording {} (${RECORD_TO_ENV}) failed: {e}",
                    w.path().display()
                ))
            })?;
        }
        Ok(report)
    }

    /// Launch mode, writing every stream to the recording `writer` instead
    /// of decoding it (`cannoli record`): `args` is `PROGRAM [ARGS...]`.
    /// The report's totals count chunks and bytes, not events. Finish the
    /// recording with [`cannoli::recording::Writer::finish`] afterwards.
    pub fn record(
        self,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        writer: Arc<cannoli::recording::Writer>,
    ) -> Result<Report, Error> {
        let mut args = args.into_iter().map(Into::into);
        let Some(program) = args.next() else {
            return Err(Error::Recording(
                "recording needs a program to run: give PROGRAM [ARGS...]".into(),
            ));
        };
        let threads = self.threads;
        self.launch_serving(
            program,
            args.collect(),
            Box::new(move |server, done| server.record_until(writer, threads, done)),
        )
    }

    /// Launch mode with `serve` running the server (in its own thread)
    /// until its `done` says QEMU has exited.
    fn launch_serving(
        self,
        program: OsString,
        args: Vec<OsString>,
        serve: Serve,
    ) -> Result<Report, Error> {
        let mut cmd = self.qemu_command(&program, &args)?;
        // A socket in a directory of this run that only this user can
        // enter, and a fresh secret only QEMU is told (QEMU hides both
        // variables from the guest). `listen` chooses another address.
        let run_dir = RunDir::create().map_err(|e| Error::Io {
            what: "creating the run's private socket directory".into(),
            source: e,
        })?;
        let addr = match &self.listen {
            Some(a) => a.clone(),
            None => format!("unix:{}", run_dir.path.join("c.sock").display()),
        };
        let server = Server::bind(&addr).map_err(Error::Listen)?;
        // Once QEMU has exited, the server is told at once (not at its
        // next poll of `exited`).
        let waker = server.waker().map_err(Error::Server)?;
        cmd.env(cannoli::wire::ADDR_ENV, server.addr().to_string());
        cmd.env(cannoli::wire::TOKEN_ENV, server.token().to_hex());
        if std::env::var_os("CANNOLI_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0") {
            eprintln!("{}: {}", self.name, show_command(&cmd));
        }
        // The spawned child is the run's guardian, QEMU its child (see
        // guard.rs): whatever happens to the launcher, the tree dies with
        // it. What runs before QEMU's exec comes after the guardian's
        // fork, in QEMU's process.
        let guard = guard::Guard::install(&mut cmd).map_err(|e| Error::Io {
            what: "setting up the run's guardian".into(),
            source: e,
        })?;
        signals::restore_fd_limit(&mut cmd);
        signals::grow_fd_table(&mut cmd);

        let qemu = PathBuf::from(cmd.get_program());
        let forwarding = signals::Forwarding::install();
        let subreaper = tree::Subreaper::become_one();
        let spawned = cmd.spawn();
        drop(cmd); // the guardian's end of the socket pair, ours no more
        let mut child = spawned.map_err(|e| Error::Spawn {
            qemu: qemu.clone(),
            source: e,
        })?;
        let pid = child.id();
        let guard = Arc::new(guard);

        // Set once the tree has exited: the server drains what is left.
        let exited = Arc::new(AtomicBool::new(false));
        let exited2 = exited.clone();
        let guard2 = guard.clone();
        let server_thread = std::thread::Builder::new()
            .name("cannoli-server".into())
            .spawn(move || {
                let r = serve(server, &|| exited2.load(Ordering::Acquire));
                if r.is_err() {
                    // QEMU would wait forever for a client that is gone.
                    guard2.kill_tree();
                }
                r
            });
        let server_thread = match server_thread {
            Ok(h) => h,
            Err(e) => {
                guard.kill_tree();
                let _ = child.wait();
                return Err(Error::Io {
                    what: "cannot start the server thread".into(),
                    source: e,
                });
            }
        };

        // The guardian exits once every process of the tree has, with
        // QEMU's status.
        let waited = signals::wait_exited_nowait(pid);
        let status = waited.and_then(|()| child.wait());
        drop(forwarding);
        // Should the guardian itself have been killed, QEMU's processes
        // that outlived it are ours now: wait for them too.
        let _ = tree::Orphans::new(&qemu).wait_all();
        drop(subreaper);
        exited.store(true, Ordering::Release);
        waker.wake();
        let status = status.map_err(|e| Error::Io {
            what: "waiting for QEMU".into(),
            source: e,
        })?;
        let mut stats = match server_thread.join() {
            Ok(r) => r.map_err(Error::Server)?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        // Every guest runs at least one instruction, which connects it: a
        // QEMU that never connected traced nothing (it failed before the
        // program ran, or was killed first), and "0 lost" would be a lie.
        if stats.connections == 0 && stats.refused_connections == 0 {
            eprintln!(
                "{}: QEMU exited ({}) without ever connecting: nothing was traced",
                self.name,
                show_status(status)
            );
            stats.missing_processes += 1;
        }
        Ok(Report {
            status: exit_code(status),
            status_known: true,
            exit: Some(status),
            stats,
        })
    }
}

/// Launch mode of any tool also records the run it traces to this file
/// (a live run and its recording at once: `tool --replay FILE` gives the
/// same output as that run).
pub const RECORD_TO_ENV: &str = "CANNOLI_RECORD_TO";

/// The recording of `$CANNOLI_RECORD_TO`.
fn tee_writer(
    path: &std::path::Path,
    program: &OsString,
    args: &[OsString],
) -> Result<cannoli::recording::Writer, Error> {
    let guest = find::resolve_program(program)
        .ok()
        .and_then(|p| arch::inspect(&p).ok())
        .map(|g| g.arch.name.to_string());
    let info = cannoli::recording::Info {
        writer: env!("CARGO_PKG_VERSION").into(),
        hooks: cannoli::recording::Hooks::preset("custom"),
        command: std::iter::once(program)
            .chain(args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        guest,
        started_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    cannoli::recording::Writer::create(path, &info, cannoli::recording::DEFAULT_LEVEL).map_err(
        |e| {
            Error::Recording(format!(
                "cannot create the recording {} (${RECORD_TO_ENV}): {e}",
                path.display()
            ))
        },
    )
}

/// How launch mode serves the run: decoding into a tool, or recording.
type Serve = Box<dyn FnOnce(Server, &dyn Fn() -> bool) -> Result<Stats, cannoli::Error> + Send>;

/// "status N" or "signal N" for a message.
fn show_status(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

/// The status a shell would report: the exit code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

/// A path fit to print: control characters escaped.
pub(crate) fn escape_path(p: &std::path::Path) -> String {
    cannoli::wire::escape(&p.display().to_string()).into_owned()
}

/// The running executable's file name (for messages), without the
/// `.NAME-wrapped` of a Nix wrapper.
pub fn tool_name() -> String {
    let name = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "cannoli".into());
    match name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix("-wrapped"))
    {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => name,
    }
}

fn show_command(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            // The run's secret stays out of logs.
            let v = if k == cannoli::wire::TOKEN_ENV {
                "…".into()
            } else {
                v.to_string_lossy()
            };
            s += &format!("{}={v} ", k.to_string_lossy());
        }
    }
    s += &cmd.get_program().to_string_lossy();
    for a in cmd.get_args() {
        s.push(' ');
        s += &a.to_string_lossy();
    }
    s
}
