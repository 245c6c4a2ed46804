// SPDX-License-Identifier: GPL-2.0-or-later
//! A progress bar for a long replay (`cannoli export`, `cannoli viz`): bytes
//! of trace done of the recording's total, events per second and the time
//! left, on stderr, redrawn a few times a second.
//!
//! Only on a terminal: when stderr is a file or a pipe (CI, a script), it
//! draws nothing at all, so logs hold only the tools' own lines.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use cannoli::recording::{Progress, Recording};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Shows the progress of the replays of one recording while it lives.
/// Dropping it clears the bar.
pub struct Bar {
    bar: ProgressBar,
    stop: Option<std::sync::mpsc::Sender<()>>,
    poller: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    /// A bar for `rec`'s replays, labelled `what` (e.g. "export parquet");
    /// a bar that draws nothing if stderr is not a terminal.
    pub fn new(rec: &Recording, what: &str) -> Bar {
        let total = rec.chunk_bytes();
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(4)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix}: [{bar:30}] {percent:>3}% {msg} {elapsed_precise}, {eta} left",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        if bar.is_hidden() {
            return Bar {
                bar,
                stop: None,
                poller: None,
            };
        }
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let poller = {
            let bar = bar.clone();
            let progress: Arc<Progress> = rec.progress();
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                loop {
                    let (bytes, events) = (progress.bytes(), progress.events());
                    bar.set_position(bytes.min(total));
                    let secs = start.elapsed().as_secs_f64().max(1e-3);
                    bar.set_message(format!(
                        "{} events, {:.1} M/s",
                        events,
                        events as f64 / secs / 1e6
                    ));
                    match stopped.recv_timeout(Duration::from_millis(250)) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
            })
        };
        Bar {
            bar,
            stop: Some(stop),
            poller: Some(poller),
        }
    }

    /// Starts the bar again for another pass over the recording (viz draws
    /// in two), labelled `what`.
    pub fn next_pass(&self, what: &str) {
        self.bar.set_prefix(what.to_string());
        self.bar.reset();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
        self.bar.finish_and_clear();
    }
}
