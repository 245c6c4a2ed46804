// SPDX-License-Identifier: GPL-2.0-or-later
//! cannoli's end-to-end tests, one test binary (linking one per file was
//! most of the build on a small machine). Each file of `tests/` is a module
//! of the same name, so a test's path starts with its file's name:
//!
//! ```sh
//! cargo test --release -p e2e --test e2e -- layout::         # one file
//! cargo test --release -p e2e --test e2e -- exactness::mipsel # one file, one guest
//! ```
//!
//! What each file checks is in its own header and in `e2e/README.md`.

mod channel;
mod crash;
mod errors;
mod exactness;
mod flake;
mod golang;
mod guestview;
mod heap;
mod heap_suppress;
mod heap_table;
mod hooks;
mod hostile;
mod launch;
mod layout;
mod manythreads;
mod parquet;
mod processes;
mod recording;
mod storm;
mod syscalls;
mod tenet;
mod viz;
