//! The dashboard (docs/DASHBOARD.md): a page, a script and a style sheet
//! compiled into the binary and served at `/ui/` without a token. They hold
//! no data: the page asks for a token and calls the API with it, so the
//! dashboard shows exactly what the token may read. Nothing is loaded from
//! elsewhere, and the Content-Security-Policy says so to the browser.

use crate::answer::Answer;

/// The dashboard's files: (path, content type, body).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "/ui/",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "/ui/app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "/ui/style.css",
        "text/css; charset=utf-8",
        include_str!("ui/style.css"),
    ),
];

/// Only this origin's script, style, images and API; no framing, no
/// plugins, no inline code (the page has none), forms post nowhere.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is the dashboard's.
pub fn is_ui(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The answer to `method` on a dashboard `path`: a file, a redirect from
/// `/ui` to `/ui/`, a 405 for anything but GET and HEAD, or a 404.
pub fn answer(method: &str, path: &str) -> Answer {
    let mut headers = vec![
        ("Content-Security-Policy", CSP.to_string()),
        ("X-Content-Type-Options", "nosniff".to_string()),
        ("Referrer-Policy", "no-referrer".to_string()),
        ("X-Frame-Options", "DENY".to_string()),
        // A new binary may bring new files under the same names.
        ("Cache-Control", "no-cache".to_string()),
    ];
    let text = |status: u16, mut headers: Vec<(&'static str, String)>, body: &str| {
        headers.push(("Content-Type", "text/plain; charset=utf-8".to_string()));
        Answer {
            status,
            headers,
            body: body.to_string(),
        }
    };
    if method != "GET" && method != "HEAD" {
        headers.push(("Allow", "GET, HEAD".to_string()));
        return text(
            405,
            headers,
            &format!("{method} is not allowed on {path} (allowed: GET, HEAD)\n"),
        );
    }
    if path == "/ui" {
        headers.push(("Location", "/ui/".to_string()));
        return text(308, headers, "see /ui/\n");
    }
    let path = if path == "/ui/index.html" {
        "/ui/"
    } else {
        path
    };
    match ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, ctype, body)) => {
            headers.push(("Content-Type", (*ctype).to_string()));
            Answer {
                status: 200,
                headers,
                body: (*body).to_string(),
            }
        }
        None => text(404, headers, &format!("no such file: {path}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_served_with_their_types_and_a_strict_policy() {
        for (path, ctype) in [
            ("/ui/", "text/html"),
            ("/ui/index.html", "text/html"),
            ("/ui/app.js", "text/javascript"),
            ("/ui/style.css", "text/css"),
        ] {
            let a = answer("GET", path);
            assert_eq!(a.status, 200, "{path}");
            assert!(
                a.header("content-type").unwrap().starts_with(ctype),
                "{path}"
            );
            assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
            let csp = a.header("content-security-policy").unwrap();
            assert!(csp.starts_with("default-src 'self'"), "{csp}");
            assert!(!csp.contains("unsafe"), "{csp}");
            assert!(!a.body.is_empty());
        }
        assert_eq!(answer("GET", "/ui/nothing.js").status, 404);
        let a = answer("GET", "/ui");
        assert_eq!((a.status, a.header("location")), (308, Some("/ui/")));
        let a = answer("POST", "/ui/");
        assert_eq!((a.status, a.header("allow")), (405, Some("GET, HEAD")));
        assert!(is_ui("/ui") && is_ui("/ui/app.js") && !is_ui("/uix") && !is_ui("/v1/ui"));
    }

    /// The policy forbids inline code and other origins: the page must have
    /// neither, or the browser would refuse it.
    #[test]
    fn the_page_has_no_inline_code_and_loads_nothing_from_elsewhere() {
        for (path, _, body) in ASSETS {
            // SVG elements are made in their namespace, which is a URL.
            let body = body.replace("http://www.w3.org/2000/svg", "");
            for bad in [
                "http://", "https://", "//cdn", "style=\"", "onclick", "onload",
            ] {
                assert!(!body.contains(bad), "{path} contains `{bad}`");
            }
        }
        let html = ASSETS[0].2;
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("<script src=\"app.js\""));
        // Scripts set no inline style attribute either (the policy blocks it).
        assert!(!ASSETS[1].2.contains("setAttribute('style'"));
        assert!(!ASSETS[1].2.contains("innerHTML"));
    }
}
