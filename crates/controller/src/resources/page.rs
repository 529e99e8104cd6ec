//! Pages of the list routes: `?limit=N&after=CURSOR`. A list is ordered by its
//! items' key (a tenant's name, a host's id, ...); a page is the first `limit`
//! items whose key comes after the cursor, and the next page is advertised
//! with an RFC 8288 `Link: <...>; rel="next"` header, so a list's body stays a
//! JSON array. The cursor is the last item's key, hex-encoded: opaque to
//! clients, and stable when items before it come and go. Pure: the HTTP edge
//! applies it to the reply it is about to send (after a tenant's listing is
//! filtered, so that pages count what the caller sees).

use std::cmp::Ordering;

use serde_json::Value;

use super::{percent_decode, Reply};
use crate::error::ApiError;

/// Items per page when the request gives no `limit`.
pub const DEFAULT_LIMIT: usize = 500;

/// The largest `limit` accepted.
pub const MAX_LIMIT: usize = 5000;

/// How an item of a list is keyed (and so ordered).
type KeyFn = fn(&Value) -> Vec<Value>;

/// The list routes (all `GET`) and their items' keys.
const LISTS: &[(&str, KeyFn)] = &[
    ("/v1/tenants", |v| fields(v, &["tenant"])),
    ("/v1/hosts", |v| fields(v, &["id"])),
    ("/v1/vms", |v| fields(v, &["tenant", "name"])),
    ("/v1/instances", instance_key),
    ("/v1/placement", instance_key),
    ("/v1/chains", |v| fields(v, &["tenant", "id"])),
    ("/v1/events", |v| fields(v, &["id"])),
    ("/v1/tokens", |v| fields(v, &["name"])),
    ("/v1/tenants/{name}/blocks", |v| fields(v, &["id"])),
    ("/v1/backends", |v| {
        fields(v, &["tenant", "middlebox", "backend"])
    }),
];

fn fields(v: &Value, names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| v.get(n).cloned().unwrap_or(Value::Null))
        .collect()
}

/// An instance by tenant, middlebox and index (the last part of its name,
/// `acme/fw/10`), as numbers order: the placement's own order.
fn instance_key(v: &Value) -> Vec<Value> {
    let k = v
        .get("name")
        .and_then(Value::as_str)
        .and_then(|n| n.rsplit('/').next())
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(Value::Null, Value::from);
    let mut key = fields(v, &["tenant", "middlebox"]);
    key.push(k);
    key
}

/// Whether `GET tpl` is a paginated list.
pub fn is_list(method: &str, tpl: &str) -> bool {
    method == "GET" && LISTS.iter().any(|(t, _)| *t == tpl)
}

/// A list request's page: its size and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct PageQuery {
    /// Items at most.
    pub limit: usize,
    /// The key of the last item of the previous page.
    pub after: Option<Vec<Value>>,
}

impl Default for PageQuery {
    fn default() -> PageQuery {
        PageQuery {
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// A list request's paging, as parsed before it runs.
#[derive(Debug, Clone)]
pub struct Pager {
    path: String,
    rest: String,
    page: PageQuery,
    key: KeyFn,
}

/// Splits `limit` and `after` off a query string: the page asked for and the
/// rest of the query (for the resource's own parameters). A bad `limit` or
/// `after` is a 400 naming it.
pub fn split(query: &str) -> Result<(PageQuery, String), ApiError> {
    let mut page = PageQuery::default();
    let mut rest = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("limit", v)) => {
                page.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad(format!(
                            "limit: `{v}` is not a number from 1 to {MAX_LIMIT}"
                        ))
                    })?
            }
            Some(("after", v)) => {
                page.after = Some(decode_cursor(&percent_decode(v)).ok_or_else(|| {
                    ApiError::bad(format!(
                        "after: `{v}` is not a cursor (pass on the one a `Link: rel=\"next\"` header gave)"
                    ))
                })?)
            }
            _ => rest.push(kv),
        }
    }
    Ok((page, rest.join("&")))
}

/// The paging of a request, if `GET tpl` is a list (`None` otherwise): its page
/// parameters parsed (a 400 if bad).
pub fn pager(method: &str, tpl: &str, path: &str, query: &str) -> Result<Option<Pager>, ApiError> {
    let Some((_, key)) = LISTS.iter().find(|(t, _)| method == "GET" && *t == tpl) else {
        return Ok(None);
    };
    let (page, rest) = split(query)?;
    Ok(Some(Pager {
        path: path.to_string(),
        rest,
        page,
        key: *key,
    }))
}

impl Pager {
    /// The page of `reply` (a JSON array) this request asked for, and the
    /// `Link` header's value when a next page exists. Anything but a JSON array
    /// passes unchanged.
    pub fn apply(&self, reply: Reply) -> (Reply, Option<String>) {
        let Reply::Json(code, Value::Array(items)) = reply else {
            return (reply, None);
        };
        let (items, next) = paginate(items, self.key, &self.page);
        let link = next.map(|cursor| {
            let mut q = self.rest.clone();
            if !q.is_empty() {
                q.push('&');
            }
            format!(
                "<{}?{q}limit={}&after={cursor}>; rel=\"next\"",
                self.path, self.page.limit
            )
        });
        (Reply::Json(code, Value::Array(items)), link)
    }
}

/// The items of `page`, ordered by `key`, and the cursor of the next page if
/// there are more.
pub fn paginate(
    mut items: Vec<Value>,
    key: KeyFn,
    page: &PageQuery,
) -> (Vec<Value>, Option<String>) {
    // Stable: items with equal keys keep the order they were listed in.
    items.sort_by(|a, b| cmp_key(&key(a), &key(b)));
    if let Some(after) = &page.after {
        items.retain(|v| cmp_key(&key(v), after) == Ordering::Greater);
    }
    if items.len() <= page.limit {
        return (items, None);
    }
    items.truncate(page.limit);
    let cursor = items.last().map(|v| encode_cursor(&key(v)));
    (items, cursor)
}

fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

fn cmp_value(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_u64(), y.as_u64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.total_cmp(&y)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn cmp_key(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match cmp_value(x, y) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    a.len().cmp(&b.len())
}

/// A key as a cursor: its compact JSON, hex-encoded (URL-safe as it is, and
/// nothing a client should take apart).
fn encode_cursor(key: &[Value]) -> String {
    Value::Array(key.to_vec())
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_cursor(s: &str) -> Option<Vec<Value>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    match serde_json::from_slice(&bytes?).ok()? {
        Value::Array(key) => Some(key),
        _ => None,
    }
}

/// The `rel="next"` target of a `Link` header's value, if it has one.
pub fn next_link(header: &str) -> Option<&str> {
    header.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then_some(target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pager_of(url: &str) -> Result<Pager, ApiError> {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        Ok(pager("GET", path, path, query)?.expect("a list"))
    }

    fn target(link: &str) -> String {
        next_link(link).expect("rel=next").to_string()
    }

    #[test]
    fn three_pages_of_seven_in_a_stable_order() {
        // Listed out of order: pages follow the key (a host's id, as a number).
        let hosts: Vec<Value> = [7, 3, 10, 1, 5, 2, 4]
            .iter()
            .map(|id| json!({ "id": id, "name": format!("h{id}") }))
            .collect();
        let mut url = "/v1/hosts?limit=3".to_string();
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let (reply, link) = pager_of(&url)
                .unwrap()
                .apply(Reply::Json(200, Value::Array(hosts.clone())));
            let Reply::Json(200, Value::Array(items)) = reply else {
                panic!("not an array: {reply:?}")
            };
            pages += 1;
            assert!(items.len() <= 3);
            seen.extend(items.iter().map(|v| v["id"].as_u64().unwrap()));
            match link {
                Some(l) => url = target(&l),
                None => break,
            }
            assert!(pages < 10, "pages never end");
        }
        assert_eq!(pages, 3);
        assert_eq!(seen, [1, 2, 3, 4, 5, 7, 10]);
    }

    #[test]
    fn a_cursor_survives_the_items_before_it_going_away() {
        let names =
            |ns: &[&str]| -> Vec<Value> { ns.iter().map(|n| json!({ "tenant": n })).collect() };
        let p = pager_of("/v1/tenants?limit=2").unwrap();
        let (_, link) = p.apply(Reply::Json(200, Value::Array(names(&["a", "b", "c", "d"]))));
        let next = target(&link.unwrap());
        // `a` and `b` deleted, `bb` added meanwhile: the next page starts after `b`.
        let (reply, link) = pager_of(&next)
            .unwrap()
            .apply(Reply::Json(200, Value::Array(names(&["bb", "c", "d"]))));
        assert_eq!(reply, Reply::Json(200, Value::Array(names(&["bb", "c"]))));
        assert!(link.is_some());
    }

    #[test]
    fn the_next_link_keeps_the_other_parameters_and_the_limit() {
        let p = pager_of("/v1/events?kind=drain&limit=1").unwrap();
        let evs = json!([{ "id": 1 }, { "id": 2 }]);
        let (_, link) = p.apply(Reply::Json(200, evs));
        let link = link.unwrap();
        assert!(link.ends_with("; rel=\"next\""), "{link}");
        let t = target(&link);
        assert!(t.starts_with("/v1/events?kind=drain&limit=1&after="), "{t}");
    }

    #[test]
    fn bad_limits_and_cursors_are_400s_naming_them() {
        for q in [
            "limit=0",
            "limit=5001",
            "limit=x",
            "limit=-1",
            "after=zz",
            "after=7b7d",
        ] {
            let e = split(q).expect_err(q);
            assert_eq!(e.status, 400, "{q}");
            assert!(e.msg.starts_with(q.split('=').next().unwrap()), "{q}: {e}");
        }
        let (p, rest) = split("since=3&limit=5000").unwrap();
        assert_eq!((p.limit, rest.as_str()), (MAX_LIMIT, "since=3"));
        assert_eq!(split("").unwrap().0.limit, DEFAULT_LIMIT);
    }

    #[test]
    fn instances_order_by_their_index_as_a_number() {
        let items: Vec<Value> = ["t/fw/10", "t/fw/2", "t/a/1"]
            .iter()
            .map(|n| {
                let mut parts = n.split('/');
                json!({ "tenant": parts.next(), "middlebox": parts.next(), "name": n })
            })
            .collect();
        let key = LISTS.iter().find(|(t, _)| *t == "/v1/instances").unwrap().1;
        let (page, _) = paginate(items, key, &PageQuery::default());
        let names: Vec<&str> = page.iter().map(|v| v["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["t/a/1", "t/fw/2", "t/fw/10"]);
    }

    #[test]
    fn link_headers_are_read_by_their_rel() {
        assert_eq!(
            next_link("</a?after=1>; rel=\"prev\", </a?after=9>; rel=\"next\""),
            Some("/a?after=9")
        );
        assert_eq!(next_link("</a>; rel=prev"), None);
        assert_eq!(next_link("garbage"), None);
    }
}
