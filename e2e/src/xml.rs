// SPDX-License-Identifier: GPL-2.0-or-later
//! A small XML reader, enough for Valgrind's `--xml=yes` output
//! ([`crate::memcheck`]): elements, text, the five named entities and
//! character references, comments, CDATA, the declaration and a DOCTYPE.
//! Attributes are read past (Valgrind's protocol has none that matter).
//!
//! Written here rather than taken from a crate: the format Valgrind writes
//! is small and fixed, and the e2e crate stays free of a parser it would
//! use once.

use std::fmt;

/// One element: its name, and its children in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub children: Vec<Node>,
}

/// A child of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Element(Element),
    Text(String),
}

/// Why a document could not be read, and where (a byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlError {
    pub at: usize,
    pub what: String,
}

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "XML error at byte {}: {}", self.at, self.what)
    }
}

impl std::error::Error for XmlError {}

impl Element {
    /// The child elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// The first child element called `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.name == name)
    }

    /// Every child element called `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements().filter(move |e| e.name == name)
    }

    /// The text of this element and its descendants, concatenated.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for n in &self.children {
            match n {
                Node::Text(t) => s.push_str(t),
                Node::Element(e) => s.push_str(&e.text()),
            }
        }
        s
    }

    /// The trimmed text of the first child called `name`.
    pub fn child_text(&self, name: &str) -> Option<String> {
        self.child(name).map(|e| e.text().trim().to_string())
    }
}

/// Reads a whole document; returns its root element.
pub fn parse(doc: &str) -> Result<Element, XmlError> {
    let mut r = Reader { s: doc, pos: 0 };
    r.skip_misc()?;
    let root = r.element()?;
    r.skip_misc()?;
    if r.pos < r.s.len() {
        return Err(r.err("content after the root element"));
    }
    Ok(root)
}

struct Reader<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &str) -> XmlError {
        XmlError {
            at: self.pos,
            what: what.to_string(),
        }
    }

    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    /// Moves past `end`, which must come; `what` names the construct.
    fn skip_past(&mut self, end: &str, what: &str) -> Result<(), XmlError> {
        match self.rest().find(end) {
            Some(i) => {
                self.pos += i + end.len();
                Ok(())
            }
            None => Err(self.err(&format!("unterminated {what}"))),
        }
    }

    /// White space, comments, processing instructions and a DOCTYPE.
    fn skip_misc(&mut self) -> Result<(), XmlError> {
        loop {
            let t = self.rest();
            let trimmed = t.trim_start();
            self.pos += t.len() - trimmed.len();
            if trimmed.starts_with("<?") {
                self.skip_past("?>", "processing instruction")?;
            } else if trimmed.starts_with("<!--") {
                self.skip_past("-->", "comment")?;
            } else if trimmed.starts_with("<!DOCTYPE") {
                self.skip_past(">", "DOCTYPE")?;
            } else {
                return Ok(());
            }
        }
    }

    fn name(&mut self) -> Result<String, XmlError> {
        let n = self
            .rest()
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(self.rest().len());
        if n == 0 {
            return Err(self.err("expected a name"));
        }
        let name = self.rest()[..n].to_string();
        self.pos += n;
        Ok(name)
    }

    /// An element, at its `<`.
    fn element(&mut self) -> Result<Element, XmlError> {
        if !self.rest().starts_with('<') {
            return Err(self.err("expected an element"));
        }
        self.pos += 1;
        let name = self.name()?;
        // Attributes: skipped, minding quoted `>`.
        let mut quote = None;
        let mut self_closing = false;
        loop {
            let Some(c) = self.rest().chars().next() else {
                return Err(self.err(&format!("unterminated start tag <{name}")));
            };
            self.pos += c.len_utf8();
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '>') => break,
                (None, '/') if self.rest().starts_with('>') => {
                    self.pos += 1;
                    self_closing = true;
                    break;
                }
                _ => {}
            }
        }
        let mut e = Element {
            name,
            children: Vec::new(),
        };
        if self_closing {
            return Ok(e);
        }
        let mut text = String::new();
        loop {
            let t = self.rest();
            if t.is_empty() {
                return Err(self.err(&format!("element <{}> is not closed", e.name)));
            }
            if let Some(after) = t.strip_prefix("</") {
                let close = after
                    .find('>')
                    .ok_or_else(|| self.err("unterminated end tag"))?;
                if after[..close].trim() != e.name {
                    return Err(self.err(&format!(
                        "</{}> closes <{}>",
                        after[..close].trim(),
                        e.name
                    )));
                }
                self.pos += 2 + close + 1;
                flush(&mut text, &mut e);
                return Ok(e);
            } else if t.starts_with("<!--") {
                self.skip_past("-->", "comment")?;
            } else if let Some(after) = t.strip_prefix("<![CDATA[") {
                let end = after
                    .find("]]>")
                    .ok_or_else(|| self.err("unterminated CDATA"))?;
                text.push_str(&after[..end]);
                self.pos += 9 + end + 3;
            } else if t.starts_with("<?") {
                self.skip_past("?>", "processing instruction")?;
            } else if t.starts_with('<') {
                flush(&mut text, &mut e);
                let child = self.element()?;
                e.children.push(Node::Element(child));
            } else if let Some(after) = t.strip_prefix('&') {
                let end = after
                    .find(';')
                    .ok_or_else(|| self.err("unterminated entity"))?;
                text.push(entity(&after[..end]).ok_or_else(|| self.err("unknown entity"))?);
                self.pos += 1 + end + 1;
            } else {
                let n = t.find(['<', '&']).unwrap_or(t.len());
                text.push_str(&t[..n]);
                self.pos += n;
            }
        }
    }
}

fn flush(text: &mut String, e: &mut Element) {
    if !text.is_empty() {
        e.children.push(Node::Text(std::mem::take(text)));
    }
}

/// The character an entity reference (without `&` and `;`) stands for.
fn entity(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        "apos" => '\'',
        _ => {
            let n = name.strip_prefix('#')?;
            let v = match n.strip_prefix('x').or_else(|| n.strip_prefix('X')) {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(v)?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_elements_text_and_entities() {
        let doc = "<?xml version=\"1.0\"?>\n<!-- c -->\n<!DOCTYPE x>\n\
                   <a k=\"v>\"><b>1 &lt; 2 &amp;&#x41;&#66;</b><c/><!-- in -->\
                   <b><![CDATA[<raw>]]></b></a>\n";
        let a = parse(doc).unwrap();
        assert_eq!(a.name, "a");
        let bs: Vec<String> = a.all("b").map(|b| b.text()).collect();
        assert_eq!(bs, ["1 < 2 &AB", "<raw>"]);
        assert!(a.child("c").unwrap().children.is_empty());
        assert_eq!(a.elements().count(), 3);
    }

    #[test]
    fn refuses_broken_documents() {
        assert!(parse("<a><b></a>").is_err());
        assert!(parse("<a>").is_err());
        assert!(parse("<a>&nope;</a>").is_err());
        assert!(parse("<a/><b/>").is_err());
    }
}
