//! Minimal SVG charts (line/step, scatter and grouped bars) for reproduction figures.

use std::fmt::Write as _;

const W: f64 = 640.0;
const H: f64 = 420.0;
const L: f64 = 70.0;
const R: f64 = 180.0;
const T: f64 = 40.0;
const B: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One named series of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
}

/// Axis titles and chart title.
#[derive(Debug, Clone, PartialEq)]
pub struct Labels {
    /// Chart title.
    pub title: String,
    /// X axis title.
    pub x: String,
    /// Y axis title.
    pub y: String,
}

/// The empirical CDF of `values` as step points `(value, fraction <= value)`.
pub fn cdf_points(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut out = Vec::with_capacity(2 * v.len());
    for (i, &x) in v.iter().enumerate() {
        out.push((x, i as f64 / n));
        out.push((x, (i + 1) as f64 / n));
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        L + (x - self.x0) / (self.x1 - self.x0).max(1e-12) * (W - L - R)
    }
    fn py(&self, y: f64) -> f64 {
        H - B - (y - self.y0) / (self.y1 - self.y0).max(1e-12) * (H - T - B)
    }
}

fn header(out: &mut String, labels: &Labels, f: &Frame, x_ticks: bool) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        (L + W - R) / 2.0,
        escape(&labels.title)
    );
    let _ = write!(
        out,
        r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{L}" y1="{T}" x2="{L}" y2="{}" stroke="black"/>"#,
        H - B,
        W - R,
        H - B,
        H - B
    );
    for i in 0..=5 {
        let y = f.y0 + (f.y1 - f.y0) * i as f64 / 5.0;
        let py = f.py(y);
        let _ = write!(
            out,
            r##"<line x1="{L}" y1="{py}" x2="{}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            W - R,
            L - 6.0,
            py + 4.0,
            fmt_tick(y)
        );
        if x_ticks {
            let x = f.x0 + (f.x1 - f.x0) * i as f64 / 5.0;
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                f.px(x),
                H - B + 18.0,
                fmt_tick(x)
            );
        }
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        (L + W - R) / 2.0,
        H - 18.0,
        escape(&labels.x),
        (T + H - B) / 2.0,
        (T + H - B) / 2.0,
        escape(&labels.y)
    );
}

fn legend(out: &mut String, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let y = T + 10.0 + 20.0 * i as f64;
        let c = COLORS[i % COLORS.len()];
        let _ = write!(
            out,
            r#"<rect x="{}" y="{}" width="14" height="10" fill="{c}"/><text x="{}" y="{}">{}</text>"#,
            W - R + 12.0,
            y - 9.0,
            W - R + 32.0,
            y,
            escape(name)
        );
    }
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn bounds(series: &[Series]) -> Frame {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (y0, mut y1) = ys.fold((0.0f64, f64::NEG_INFINITY), |(a, b), y| {
        (a.min(y), b.max(y))
    });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if !y1.is_finite() || y1 <= y0 {
        y1 = y0 + 1.0;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    Frame { x0, x1, y0, y1 }
}

/// A line chart (use [`cdf_points`] for CDFs).
pub fn line_chart(labels: &Labels, series: &[Series]) -> String {
    let f = bounds(series);
    let mut out = String::new();
    header(&mut out, labels, &f, true);
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.2},{:.2}", f.px(x), f.py(y)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke-width="2" stroke="{}" points="{}"/>"#,
            COLORS[i % COLORS.len()],
            pts.join(" ")
        );
    }
    legend(
        &mut out,
        &series.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

/// A scatter chart.
pub fn scatter_chart(labels: &Labels, series: &[Series]) -> String {
    let mut f = bounds(series);
    f.x0 -= 0.5;
    f.x1 += 0.5;
    let mut out = String::new();
    header(&mut out, labels, &f, true);
    for (i, s) in series.iter().enumerate() {
        for &(x, y) in &s.points {
            // Series are offset sideways so equal points of different series stay visible.
            let dx = (i as f64 - (series.len() as f64 - 1.0) / 2.0) * 5.0;
            let _ = write!(
                out,
                r#"<circle cx="{:.2}" cy="{:.2}" r="3.5" fill="{}" fill-opacity="0.8"/>"#,
                f.px(x) + dx,
                f.py(y),
                COLORS[i % COLORS.len()]
            );
        }
    }
    legend(
        &mut out,
        &series.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

/// Grouped bars: one group per category, one bar per series (`values[series][category]`).
pub fn bar_chart(
    labels: &Labels,
    categories: &[String],
    names: &[String],
    values: &[Vec<f64>],
) -> String {
    let ymax = values
        .iter()
        .flatten()
        .copied()
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let f = Frame {
        x0: 0.0,
        x1: categories.len().max(1) as f64,
        y0: 0.0,
        y1: ymax,
    };
    let mut out = String::new();
    header(&mut out, labels, &f, false);
    let group_w = (W - L - R) / categories.len().max(1) as f64;
    let bar_w = group_w * 0.8 / names.len().max(1) as f64;
    for (c, cat) in categories.iter().enumerate() {
        let gx = L + group_w * c as f64 + group_w * 0.1;
        for (s, row) in values.iter().enumerate() {
            let v = row.get(c).copied().unwrap_or(0.0);
            let y = f.py(v);
            let _ = write!(
                out,
                r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"/>"#,
                gx + bar_w * s as f64,
                y,
                bar_w * 0.95,
                (H - B - y).max(0.0),
                COLORS[s % COLORS.len()]
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.2}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            H - B + 18.0,
            escape(cat)
        );
    }
    legend(
        &mut out,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps_reach_one() {
        let p = cdf_points(&[3.0, 1.0, 2.0]);
        assert_eq!(p.first(), Some(&(1.0, 0.0)));
        assert_eq!(p.last(), Some(&(3.0, 1.0)));
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn charts_are_well_formed_and_escape_labels() {
        let labels = Labels {
            title: "a<b".into(),
            x: "x".into(),
            y: "y".into(),
        };
        let s = vec![Series {
            label: "s&1".into(),
            points: vec![(0.0, 1.0), (1.0, 2.0)],
        }];
        for svg in [
            line_chart(&labels, &s),
            scatter_chart(&labels, &s),
            bar_chart(&labels, &["c".into()], &["n".into()], &[vec![2.0]]),
        ] {
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(!svg.contains("a<b") && !svg.contains("s&1"));
            assert!(!svg.contains("NaN"));
        }
    }
}
