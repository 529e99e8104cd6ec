//! The few SVG pieces the experiments' charts share: lines, a legend, escaping.

/// Colours of the charts' series, in order.
pub const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// Text escaped for SVG content.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A solid series line through `points` (already in chart coordinates).
pub fn polyline(points: impl Iterator<Item = (f64, f64)>, colour: &str) -> String {
    let pts: Vec<String> = points.map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/>\n",
        pts.join(" ")
    )
}

/// A dashed reference line (an ideal or offered load) through `points`.
pub fn dashed(points: impl Iterator<Item = (f64, f64)>) -> String {
    let pts: Vec<String> = points.map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"black\" stroke-dasharray=\"6,4\"/>\n",
        pts.join(" ")
    )
}

/// A legend of (name, colour) entries, one per line, starting at `x` near the
/// top of the chart.
pub fn legend(entries: &[(String, &str)], x: f64) -> String {
    let mut s = String::new();
    for (i, (name, c)) in entries.iter().enumerate() {
        let ly = 30.0 + 16.0 * i as f64;
        s.push_str(&format!(
            "<line x1=\"{x}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>\n",
            x + 20.0,
            x + 25.0,
            ly + 4.0,
            escape(name)
        ));
    }
    s
}
