//! Loading PoP-level topologies: Topology Zoo GraphML and Rocketfuel weight files.

use std::collections::BTreeMap;
use std::path::Path;

use crate::SimError;

/// An undirected PoP-level topology.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Name (file stem).
    pub name: String,
    /// PoP names, indexed by node id.
    pub nodes: Vec<String>,
    /// `(a, b, weight)` undirected links, `a < b`, deduplicated.
    pub edges: Vec<(usize, usize, f64)>,
}

fn parse_err(what: &str, detail: impl Into<String>) -> SimError {
    SimError::Parse {
        what: what.to_string(),
        detail: detail.into(),
    }
}

fn dedup(edges: Vec<(usize, usize, f64)>) -> Vec<(usize, usize, f64)> {
    let mut m: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (a, b, w) in edges {
        if a == b {
            continue;
        }
        let k = (a.min(b), a.max(b));
        let e = m.entry(k).or_insert(w);
        *e = e.min(w);
    }
    m.into_iter().map(|((a, b), w)| (a, b, w)).collect()
}

/// Parses a Topology Zoo GraphML document. Links get unit weight (hop-count routing).
pub fn parse_graphml(name: &str, text: &str) -> Result<Topology, SimError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| parse_err(name, e.to_string()))?;
    let label_key = doc
        .descendants()
        .find(|n| {
            n.has_tag_name("key")
                && n.attribute("for") == Some("node")
                && n.attribute("attr.name") == Some("label")
        })
        .and_then(|n| n.attribute("id"))
        .map(str::to_string);
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut nodes = Vec::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("node")) {
        let id = n
            .attribute("id")
            .ok_or_else(|| parse_err(name, "a node has no id"))?;
        let label = label_key
            .as_deref()
            .and_then(|k| {
                n.children()
                    .find(|c| c.has_tag_name("data") && c.attribute("key") == Some(k))
            })
            .and_then(|c| c.text())
            .unwrap_or(id);
        ids.insert(id.to_string(), nodes.len());
        nodes.push(label.to_string());
    }
    let mut edges = Vec::new();
    for e in doc.descendants().filter(|n| n.has_tag_name("edge")) {
        let end = |attr: &str| -> Result<usize, SimError> {
            let v = e
                .attribute(attr)
                .ok_or_else(|| parse_err(name, format!("an edge has no {attr}")))?;
            ids.get(v)
                .copied()
                .ok_or_else(|| parse_err(name, format!("edge names unknown node '{v}'")))
        };
        edges.push((end("source")?, end("target")?, 1.0));
    }
    if nodes.is_empty() {
        return Err(parse_err(name, "no nodes"));
    }
    Ok(Topology {
        name: name.to_string(),
        nodes,
        edges: dedup(edges),
    })
}

/// Parses a Rocketfuel `weights.intra` file, collapsing routers into PoPs by city (the
/// router name without its trailing digits). A PoP link keeps the smallest router-link
/// weight between the two cities.
pub fn parse_rocketfuel(name: &str, text: &str) -> Result<Topology, SimError> {
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            return Err(parse_err(
                name,
                format!("line {}: expected 'routerA routerB weight'", i + 1),
            ));
        }
        let w: f64 = f[2]
            .parse()
            .map_err(|_| parse_err(name, format!("line {}: bad weight '{}'", i + 1, f[2])))?;
        if !w.is_finite() || w < 0.0 {
            return Err(parse_err(
                name,
                format!("line {}: negative or non-finite weight", i + 1),
            ));
        }
        let mut id = |router: &str| {
            let city = router
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .replace('+', " ");
            *ids.entry(city.clone()).or_insert_with(|| {
                nodes.push(city);
                nodes.len() - 1
            })
        };
        let (a, b) = (id(f[0]), id(f[1]));
        edges.push((a, b, w));
    }
    if nodes.is_empty() {
        return Err(parse_err(name, "no links"));
    }
    Ok(Topology {
        name: name.to_string(),
        nodes,
        edges: dedup(edges),
    })
}

/// Loads a topology by extension: `.graphml` or Rocketfuel `.intra`.
pub fn load(path: &Path) -> Result<Topology, SimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let file = path
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("topology");
    let stem = file.split('.').next().unwrap_or(file);
    if file.ends_with(".graphml") {
        parse_graphml(stem, &text)
    } else if file.ends_with(".intra") {
        parse_rocketfuel(&format!("AS{stem}"), &text)
    } else {
        Err(parse_err(
            file,
            "unknown format: expected .graphml or Rocketfuel .intra",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRAPHML: &str = r#"<?xml version="1.0"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="label" attr.type="string" for="node" id="d1"/>
  <graph edgedefault="undirected">
    <node id="0"><data key="d1">A</data></node>
    <node id="1"><data key="d1">B</data></node>
    <node id="2"><data key="d1">C</data></node>
    <edge source="0" target="1"/><edge source="1" target="0"/><edge source="1" target="2"/>
  </graph>
</graphml>"#;

    #[test]
    fn graphml_nodes_labels_and_deduplicated_edges() {
        let t = parse_graphml("toy", GRAPHML).unwrap();
        assert_eq!(t.nodes, vec!["A", "B", "C"]);
        assert_eq!(t.edges, vec![(0, 1, 1.0), (1, 2, 1.0)]);
        assert!(parse_graphml("bad", "<graphml><node/></graphml>").is_err());
        assert!(parse_graphml(
            "bad",
            GRAPHML.replace("target=\"2\"", "target=\"9\"").as_str()
        )
        .is_err());
    }

    #[test]
    fn rocketfuel_collapses_routers_into_cities() {
        let text = "Sydney,+Australia1 Sydney,+Australia2 1\nSydney,+Australia1 Perth5 3\nSydney,+Australia2 Perth6 2\n";
        let t = parse_rocketfuel("AS1", text).unwrap();
        assert_eq!(t.nodes, vec!["Sydney, Australia", "Perth"]);
        assert_eq!(t.edges, vec![(0, 1, 2.0)]);
        assert!(parse_rocketfuel("AS1", "a1 b2\n").is_err());
        assert!(parse_rocketfuel("AS1", "a1 b2 -3\n").is_err());
    }

    #[test]
    fn shipped_abilene_has_eleven_pops() {
        let p =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/topology-zoo/Abilene.graphml");
        let t = load(&p).unwrap();
        assert_eq!(t.nodes.len(), 11);
        assert_eq!(t.name, "Abilene");
        assert!(t.nodes.iter().any(|n| n == "Chicago"));
    }
}
