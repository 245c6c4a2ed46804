//! Untrusted text (from a hello, a trace, a command line) made fit to
//! print on one line.

/// Untrusted text made fit for one line of a message: control characters
/// escaped (a terminal sees no escape sequence, a log no line break), at
/// most `max` bytes of it kept (escapes included), `…` marking a cut.
pub fn tame(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let before = out.len();
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    out
}

/// Untrusted text (a program's or a file's name from a trace, a recorded
/// command line) fit to print: control characters escaped (`\u{1b}`,
/// `\n`, ...), so that a terminal sees no escape sequence and a line stays
/// one line; unchanged (and not copied) when it has none.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_prints_as_one_harmless_line() {
        assert!(matches!(escape("/bin/ls"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(escape("a\u{1b}[31mb\nc"), "a\\u{1b}[31mb\\nc");
        assert!(!escape("\u{1b}]0;title\u{7}").chars().any(char::is_control));
    }
}
