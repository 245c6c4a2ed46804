//! Fork: what a forked child does to the stream it inherited.

use crate::stream::{self, Cursor};

pub fn fork_child(c: &mut Cursor) {
    stream::forked_child(c);
    super::order::forked_child();
    stream::owe_replay();
}
