// SPDX-License-Identifier: GPL-2.0-or-later
//! Valgrind's `--xml=yes` output ([`crate::memcheck`]) as an owned tree
//! of elements and text, read with `roxmltree` (a DTD is allowed;
//! attributes are dropped, as Valgrind's protocol has none that matter).

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

/// Why a document could not be read (the parser's message says where).
#[derive(Debug, thiserror::Error)]
#[error("XML error: {0}")]
pub struct XmlError(#[from] roxmltree::Error);

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
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let d = roxmltree::Document::parse_with_options(doc, opt)?;
    Ok(owned(d.root_element()))
}

/// `n`'s element and text descendants as an [`Element`] (comments and
/// processing instructions dropped).
fn owned(n: roxmltree::Node<'_, '_>) -> Element {
    Element {
        name: n.tag_name().name().to_string(),
        children: n
            .children()
            .filter_map(|c| {
                if c.is_element() {
                    Some(Node::Element(owned(c)))
                } else {
                    c.text().map(|t| Node::Text(t.to_string()))
                }
            })
            .collect(),
    }
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
