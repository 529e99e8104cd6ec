//! `dataset` and `datarep`: a sticky buffer's whole value looked up in a
//! named set — Suricata's datasets (detect-dataset.c, detect-datarep.c,
//! datasets.c), the usual way operators feed a list of indicators (domains,
//! user agents, addresses, hashes) to rules.
//!
//! A set has a type (`string`, `md5`, `sha256`, `ipv4`, `ip`) and is loaded
//! from a file when a rule says `load FILE` or `state FILE`: one value per
//! line — base64 for strings, hex for hashes, dotted or colon notation for
//! addresses — optionally followed by `,REPUTATION` (0-65535), which
//! `datarep` compares. A relative `load` is found next to the rule file
//! first, then in the configuration's directory; a `state` file in the data
//! directory ([`crate::Config::data_dir`]). A line that does not parse
//! refuses the rules using the set, naming the file and line: a value
//! silently left out would change what `isnotset` matches.
//!
//! **Immutable sets** (no rule `set`s or `unset`s them) are looked up where
//! the keyword stands, during inspection, like any other keyword.
//!
//! **Sets that rules change** are shared state: one record per (set, value)
//! in table [`TABLE_DATASET`] of the function's namespace, so that every
//! instance sees what another added, as every byte of state lives in the
//! store. As `xbits` ([`crate::xbits`]) they are decided after the batch's
//! verdicts: the keyword records the value it saw and lets the inspection go
//! on; when the rule fires, the values are logged; after the batch one round
//! trip reads the records the log names, the log is replayed in packet order
//! (`isset`/`isnotset` are tested, `set` matches if the value was new and
//! adds it, `unset` matches if it was there and removes it), a use whose
//! keyword did not match has its alert withheld, and one more round trip
//! writes what changed. So such rules may not `drop` or change flowbits or
//! flowints (refused at load). A record says present or removed; a value
//! without a record is looked up in what was loaded. Sets are not written
//! back to files (`save`, `state`): their contents live in the store.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use sluice_state::{Codec, DecodeError, Key, Namespace, Reader, StateStore, StoreError, Writer};

use crate::records::Records;
use crate::rules::payload::Item;
use crate::rules::{Action, Rule, RuleError, RuleSyntax};

/// Table of the sets rules change.
pub const TABLE_DATASET: u8 = 5;

const VERSION: u8 = 1;

/// What a set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetType {
    /// Any bytes (base64 in files).
    String,
    /// 16-byte MD5 digests (hex in files).
    Md5,
    /// 32-byte SHA-256 digests (hex in files).
    Sha256,
    /// IPv4 addresses.
    Ipv4,
    /// IPv4 or IPv6 addresses (`ip`, also spelled `ipv6`).
    Ip,
}

impl SetType {
    fn parse(s: &str) -> Option<SetType> {
        Some(match s {
            "string" => SetType::String,
            "md5" => SetType::Md5,
            "sha256" => SetType::Sha256,
            "ipv4" => SetType::Ipv4,
            "ip" | "ipv6" => SetType::Ip,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            SetType::String => "string",
            SetType::Md5 => "md5",
            SetType::Sha256 => "sha256",
            SetType::Ipv4 => "ipv4",
            SetType::Ip => "ip",
        }
    }

    /// The stored form of a buffer's value for a lookup, or `None` if it
    /// cannot be in a set of this type (a 20-byte buffer in an MD5 set).
    /// An `ip` set keeps an IPv4 address as its 4 bytes then 12 zeros
    /// (Suricata's layout).
    fn lookup_form(self, data: &[u8], out: &mut [u8; 32]) -> Option<usize> {
        let n = match (self, data.len()) {
            (SetType::String, _) => return None,
            (SetType::Md5, 16) | (SetType::Sha256, 32) | (SetType::Ipv4, 4) | (SetType::Ip, 16) => {
                data.len()
            }
            (SetType::Ip, 4) => {
                out[..16].fill(0);
                out[..4].copy_from_slice(data);
                return Some(16);
            }
            _ => return Some(usize::MAX),
        };
        out[..n].copy_from_slice(data);
        Some(n)
    }

    /// The stored form of a buffer's value for `set`, or `None` if it
    /// cannot be added (Suricata: an `ipv4` set takes the first 4 bytes of
    /// a longer value; an `ip` one only 16).
    fn add_form(self, data: &[u8]) -> Option<&[u8]> {
        match (self, data.len()) {
            (SetType::String, _) => Some(data),
            (SetType::Md5, 16) | (SetType::Sha256, 32) | (SetType::Ip, 16) => Some(data),
            (SetType::Ipv4, n) if n >= 4 => Some(&data[..4]),
            _ => None,
        }
    }
}

/// `datarep`'s comparison of a value's reputation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepOp {
    /// `>`.
    Gt,
    /// `<`.
    Lt,
    /// `==`.
    Eq,
}

/// What a `dataset` or `datarep` keyword does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// `isset`: the value is in the set.
    IsSet,
    /// `isnotset`: it is not.
    IsNotSet,
    /// `set`: it was not, and is added.
    Set,
    /// `unset`: it was, and is removed.
    Unset,
    /// `datarep`: it is, with a reputation that compares so with this one.
    Rep(RepOp, u16),
}

/// A `dataset` or `datarep` keyword, and (once [`resolve`] ran) its set.
#[derive(Debug, Clone)]
pub struct DatasetKw {
    /// What it does.
    pub cmd: Cmd,
    /// The set's name (case-insensitive, as Suricata's).
    pub name: String,
    /// `type`, if given (a set's first mention must give it).
    pub ty: Option<SetType>,
    /// `load FILE` (or `state FILE`).
    pub load: Option<String>,
    /// `save FILE` (or `state FILE`): accepted, not written.
    pub save: Option<String>,
    /// `state` was used (`load` and `save` are then its file).
    pub state: bool,
    /// The set: its index among the function's sets and what was loaded.
    pub set: Option<(u32, Arc<Loaded>)>,
    /// Rules change the set: the keyword is decided after the batch.
    pub deferred: bool,
}

impl DatasetKw {
    /// A keyword doing `cmd` on set `name`, its options still to parse.
    fn new(cmd: Cmd, name: &str) -> DatasetKw {
        DatasetKw {
            cmd,
            name: name.to_string(),
            ty: None,
            load: None,
            save: None,
            state: false,
            set: None,
            deferred: false,
        }
    }
}

impl PartialEq for DatasetKw {
    fn eq(&self, o: &Self) -> bool {
        (
            self.cmd, &self.name, self.ty, &self.load, &self.save, self.state,
        ) == (o.cmd, &o.name, o.ty, &o.load, &o.save, o.state)
    }
}

impl Eq for DatasetKw {}

/// A set's loaded values, each with its reputation (0 without one).
#[derive(Debug, Default)]
pub struct Loaded {
    /// Values in their stored form.
    values: FxHashMap<Box<[u8]>, u16>,
}

impl Loaded {
    /// The reputation of `data` (looked up as `ty` does), if loaded.
    fn get(&self, ty: SetType, data: &[u8]) -> Option<u16> {
        let mut form = [0u8; 32];
        match ty.lookup_form(data, &mut form) {
            None => self.values.get(data).copied(),
            Some(usize::MAX) => None,
            Some(n) => self.values.get(&form[..n]).copied(),
        }
    }

    /// Values loaded.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True if nothing was loaded.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

fn bad(keyword: &str, v: &str) -> RuleSyntax {
    RuleSyntax::BadValue {
        keyword: keyword.into(),
        value: v.into(),
    }
}

/// Splits `v` as Suricata does: comma-separated parts, each `KEY` or
/// `KEY VALUE` (blanks before the key and between them skipped).
fn parts(v: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    v.split(',').filter_map(|p| {
        let p = p.trim_start_matches([' ', '\t']);
        if p.is_empty() {
            return None;
        }
        Some(match p.split_once(' ') {
            Some((k, rest)) => (k, Some(rest.trim_matches([' ', '\t']))),
            None => (p.trim_end(), None),
        })
    })
}

/// Parses the options after a keyword's fixed leading parts into `kw`.
fn options<'a>(
    keyword: &str,
    v: &str,
    kw: &mut DatasetKw,
    rest: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), RuleSyntax> {
    let (mut load, mut save) = (false, false);
    for (k, val) in rest {
        let Some(val) = val.filter(|s| !s.is_empty()) else {
            return Err(bad(keyword, v));
        };
        match k {
            "type" => kw.ty = Some(SetType::parse(val).ok_or_else(|| bad(keyword, v))?),
            "load" if !load && !kw.state => {
                load = true;
                kw.load = Some(val.to_string());
            }
            "save" if !save && !kw.state && keyword == "dataset" => {
                save = true;
                kw.save = Some(val.to_string());
            }
            "state" if !load && !save && !kw.state && keyword == "dataset" => {
                kw.state = true;
                kw.load = Some(val.to_string());
                kw.save = Some(val.to_string());
            }
            // Sizes of Suricata's hash tables: the store holds the values.
            "memcap" | "hashsize" => {}
            _ => return Err(bad(keyword, v)),
        }
    }
    if kw.name.is_empty() || kw.name.contains([' ', '\t']) {
        return Err(bad(keyword, v));
    }
    Ok(())
}

/// `dataset:CMD,NAME[, type T][, load F | save F | state F][, memcap M][, hashsize H]`.
pub(crate) fn parse_dataset(v: &str) -> Result<DatasetKw, RuleSyntax> {
    let mut it = parts(v);
    let (Some((cmd, None)), Some((name, None))) = (it.next(), it.next()) else {
        return Err(bad("dataset", v));
    };
    let cmd = match cmd {
        "isset" => Cmd::IsSet,
        "isnotset" => Cmd::IsNotSet,
        "set" => Cmd::Set,
        "unset" => Cmd::Unset,
        _ => return Err(bad("dataset", v)),
    };
    let mut kw = DatasetKw::new(cmd, name);
    options("dataset", v, &mut kw, it)?;
    Ok(kw)
}

/// `datarep:NAME,OP,VALUE[, type T][, load F][, memcap M][, hashsize H]`
/// with OP one of `>`, `<`, `==`.
pub(crate) fn parse_datarep(v: &str) -> Result<DatasetKw, RuleSyntax> {
    let mut it = parts(v);
    let (Some((name, None)), Some((op, None)), Some((value, None))) =
        (it.next(), it.next(), it.next())
    else {
        return Err(bad("datarep", v));
    };
    let op = match op {
        ">" => RepOp::Gt,
        "<" => RepOp::Lt,
        "==" => RepOp::Eq,
        _ => return Err(bad("datarep", v)),
    };
    let value: u16 = value.parse().map_err(|_| bad("datarep", v))?;
    let mut kw = DatasetKw::new(Cmd::Rep(op, value), name);
    options("datarep", v, &mut kw, it)?;
    if kw.load.is_some() && kw.ty.is_none() {
        return Err(bad("datarep", v));
    }
    if matches!(kw.ty, Some(SetType::Ipv4 | SetType::Ip)) {
        // Suricata 7's datarep takes hash and string sets only.
        return Err(bad("datarep", v));
    }
    Ok(kw)
}

/// The value of a hex digit.
fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Parses one line of a set file of type `ty` into its stored form and
/// reputation.
fn parse_line(ty: SetType, line: &str) -> Result<(Vec<u8>, u16), String> {
    let (value, rep) = match line.split_once(',') {
        Some((v, r)) => {
            // Suricata reads the reputation up to a further comma.
            let r = r.split(',').next().unwrap_or("");
            let n: u16 = r
                .trim()
                .parse()
                .map_err(|_| format!("`{r}` is not a reputation (0-65535)"))?;
            (v, n)
        }
        None => (line, 0),
    };
    let value = value.trim();
    let bytes = match ty {
        SetType::String => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|e| format!("`{value}` is not base64: {e}"))?
        }
        SetType::Md5 | SetType::Sha256 => {
            let want = if ty == SetType::Md5 { 32 } else { 64 };
            let b = value.as_bytes();
            if b.len() != want {
                return Err(format!(
                    "`{value}` is not a {} in hex ({want} digits)",
                    ty.name()
                ));
            }
            b.chunks(2)
                .map(|p| Some(hex(p[0])? << 4 | hex(p[1])?))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| format!("`{value}` is not hex"))?
        }
        SetType::Ipv4 => {
            let a: std::net::Ipv4Addr = value
                .parse()
                .map_err(|_| format!("`{value}` is not an IPv4 address"))?;
            a.octets().to_vec()
        }
        SetType::Ip => match value.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => {
                let mut v = vec![0u8; 16];
                v[..4].copy_from_slice(&a.octets());
                v
            }
            Ok(std::net::IpAddr::V6(a)) => match a.to_ipv4_mapped() {
                // A mapped IPv4 address is kept as that address.
                Some(v4) => {
                    let mut v = vec![0u8; 16];
                    v[..4].copy_from_slice(&v4.octets());
                    v
                }
                None => a.octets().to_vec(),
            },
            Err(_) => return Err(format!("`{value}` is not an IP address")),
        },
    };
    Ok((bytes, rep))
}

/// Reads a set file of type `ty`. Blank lines are skipped.
pub fn load_text(ty: SetType, text: &str) -> Result<Loaded, (usize, String)> {
    let mut values = FxHashMap::default();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (v, rep) = parse_line(ty, line).map_err(|e| (n + 1, e))?;
        values.insert(v.into_boxed_slice(), rep);
    }
    Ok(Loaded { values })
}

/// One set of a function.
#[derive(Debug)]
struct SetInfo {
    ty: SetType,
    load: Option<String>,
    save: Option<String>,
    loaded: Arc<Loaded>,
    /// A rule sets or unsets it.
    mutable: bool,
    /// Its name's hash, in its records' keys.
    key: u64,
}

/// 64-bit FNV-1a.
fn fnv(s: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Every keyword list of `rule`.
fn lists_mut(rule: &mut Rule) -> impl Iterator<Item = &mut Vec<Item>> {
    std::iter::once(&mut rule.items)
        .chain(std::iter::once(&mut rule.base64))
        .chain(rule.dns_query.iter_mut().map(|q| &mut q.items))
        .chain(rule.http.iter_mut().map(|l| &mut l.items))
        .chain(rule.tls.iter_mut().map(|l| &mut l.items))
        .chain(rule.smtp_file.iter_mut())
        .chain(rule.ssh.iter_mut().map(|(_, l)| l))
        .chain(rule.ip.iter_mut().map(|(_, l)| l))
        .chain(rule.hdr.iter_mut().map(|l| &mut l.items))
}

fn kws_mut(rule: &mut Rule) -> impl Iterator<Item = &mut DatasetKw> {
    lists_mut(rule).flat_map(|l| {
        l.iter_mut().filter_map(|i| match i {
            Item::Dataset(d) => Some(&mut **d),
            _ => None,
        })
    })
}

/// Every keyword list of `rule`.
fn lists(rule: &Rule) -> impl Iterator<Item = &Vec<Item>> {
    std::iter::once(&rule.items)
        .chain(std::iter::once(&rule.base64))
        .chain(rule.dns_query.iter().map(|q| &q.items))
        .chain(rule.http.iter().map(|l| &l.items))
        .chain(rule.tls.iter().map(|l| &l.items))
        .chain(rule.smtp_file.iter())
        .chain(rule.ssh.iter().map(|(_, l)| l))
        .chain(rule.ip.iter().map(|(_, l)| l))
        .chain(rule.hdr.iter().map(|l| &l.items))
}

/// True if `rule` has a dataset keyword decided after the batch.
fn deferred(rule: &Rule) -> bool {
    lists(rule)
        .flatten()
        .any(|i| matches!(i, Item::Dataset(d) if d.deferred))
}

/// Where set files are looked for.
pub struct Dirs<'a> {
    /// The configuration's directory (rule files are relative to it).
    pub base_dir: &'a Path,
    /// Where `state` files are ([`crate::Config::data_dir`]).
    pub data_dir: &'a Path,
    /// Searched for a relative `load` after the rule file's directory
    /// ([`crate::Config::dataset_dirs`]).
    pub search: &'a [PathBuf],
}

/// The file a `load` names: as given if absolute, else next to the rule
/// file if there (Suricata's rule), else in the first directory of
/// `dirs.search` that has it, else in the configuration's directory. A
/// `state` file is in the data directory.
fn load_path(load: &str, state: bool, rule_file: &str, dirs: &Dirs<'_>) -> PathBuf {
    let p = Path::new(load);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    if state {
        return dirs.base_dir.join(dirs.data_dir).join(p);
    }
    let by_rule = Path::new(rule_file)
        .parent()
        .map(|dir| dirs.base_dir.join(dir).join(p));
    by_rule
        .into_iter()
        .chain(dirs.search.iter().map(|d| dirs.base_dir.join(d).join(p)))
        .find(|c| c.exists())
        .unwrap_or_else(|| dirs.base_dir.join(p))
}

/// The function's sets, and the batch's log of the matches of rules that
/// change them.
#[derive(Default)]
pub(crate) struct Datasets {
    sets: Vec<SetInfo>,
    /// Per rule (index): it has a keyword decided after the batch.
    uses: Vec<bool>,
    /// Some rule does.
    pub any_deferred: bool,
    log: Vec<Use>,
    vals: Vec<Val>,
    /// The batch's records as replayed.
    recs: Records<Rec>,
    /// Per value of the log, its record's slot in `recs`.
    slots: Vec<u32>,
    /// Values added to the store's sets.
    pub added: u64,
}

/// A logged match of a rule whose keywords are decided after the batch.
#[derive(Debug, Clone, Copy)]
struct Use {
    event: Option<usize>,
    /// Its values: `vals[from..to]`.
    from: u32,
    to: u32,
}

/// A value one keyword saw, in its set's stored form (hashed).
#[derive(Debug, Clone, Copy)]
struct Val {
    set: u32,
    cmd: Cmd,
    digest: [u8; 32],
    /// Whether the loaded values hold it.
    loaded: bool,
}

/// A value seen by a deferred keyword during an inspection: (rule sid, set,
/// command, digest, loaded).
type Seen = (u32, u32, Cmd, [u8; 32], bool);

thread_local! {
    /// The values deferred keywords saw during the packet being decided,
    /// taken by [`Datasets::fired`] when their rule fires. The inspection
    /// ([`crate::inspect`]) has no other way out; cleared per packet.
    static SEEN: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
}

/// Forgets what deferred keywords saw (a packet starts).
pub(crate) fn clear_seen() {
    SEEN.with(|s| s.borrow_mut().clear());
}

/// How many values are recorded (a mark to truncate back to).
pub(crate) fn seen_mark() -> usize {
    SEEN.with(|s| s.borrow().len())
}

/// Forgets the values recorded after `mark` (the inspection backtracked).
pub(crate) fn seen_truncate(mark: usize) {
    SEEN.with(|s| s.borrow_mut().truncate(mark));
}

impl DatasetKw {
    /// Decides the keyword over a buffer's value during inspection; a
    /// deferred one records the value (for rule `sid`) and lets the
    /// inspection go on, unless the value cannot be in the set.
    pub(crate) fn check(&self, sid: u32, data: &[u8]) -> bool {
        // An empty buffer never matches (Suricata).
        let Some((set, loaded)) = &self.set else {
            return false;
        };
        if data.is_empty() {
            return false;
        }
        let ty = self.ty.unwrap_or(SetType::String);
        if !self.deferred {
            let rep = loaded.get(ty, data);
            return match self.cmd {
                Cmd::IsSet => rep.is_some(),
                Cmd::IsNotSet => rep.is_none(),
                Cmd::Rep(op, v) => rep.is_some_and(|r| match op {
                    RepOp::Gt => r > v,
                    RepOp::Lt => r < v,
                    RepOp::Eq => r == v,
                }),
                // Changes make a set deferred.
                Cmd::Set | Cmd::Unset => false,
            };
        }
        let mut form = [0u8; 32];
        let value: &[u8] = match self.cmd {
            Cmd::Set => match ty.add_form(data) {
                Some(v) => v,
                None => return false,
            },
            _ => match ty.lookup_form(data, &mut form) {
                None => data,
                // Cannot be in the set: `isnotset` holds, the others fail.
                Some(usize::MAX) => return self.cmd == Cmd::IsNotSet,
                Some(n) => &form[..n],
            },
        };
        let in_loaded = loaded.values.contains_key(value);
        let digest: [u8; 32] = Sha256::digest(value).into();
        SEEN.with(|s| {
            s.borrow_mut()
                .push((sid, *set, self.cmd, digest, in_loaded))
        });
        true
    }
}

/// Resolves the dataset keywords of `rules`: checks each set's type and
/// files agree across rules, loads the files, marks the sets rules change
/// and refuses (into `warnings`) rules whose sets cannot be had, and
/// deferred rules that drop or change flow variables.
pub(crate) fn resolve(
    rules: &mut Vec<Rule>,
    dirs: &Dirs<'_>,
    warnings: &mut Vec<RuleError>,
) -> Datasets {
    let mut sets: Vec<SetInfo> = Vec::new();
    let mut by_name: FxHashMap<String, usize> = FxHashMap::default();
    // Files read once per path and type.
    let mut files: FxHashMap<(PathBuf, SetType), Result<Arc<Loaded>, String>> =
        FxHashMap::default();
    let refuse = |r: &Rule, why: String, warnings: &mut Vec<RuleError>| {
        warnings.push(RuleError {
            file: r.file.to_string(),
            line: r.line,
            msg: RuleSyntax::Dataset(why),
        });
        false
    };
    // First pass: define sets (a rule's first mention with a type).
    rules.retain_mut(|r| {
        let file = r.file.clone();
        let mut err = None;
        for kw in kws_mut(r) {
            let lname = kw.name.to_ascii_lowercase();
            if let Some(&i) = by_name.get(&lname) {
                let s = &sets[i];
                if kw.ty.is_some_and(|t| t != s.ty) {
                    err = Some(format!(
                        "dataset {} already exists and is of type {}",
                        kw.name,
                        s.ty.name()
                    ));
                    break;
                }
                if (kw.load.is_some() || kw.save.is_some())
                    && (kw.load != s.load || kw.save != s.save)
                {
                    err = Some(format!(
                        "dataset {}: load or save differs from an earlier rule's",
                        kw.name
                    ));
                    break;
                }
                continue;
            }
            let Some(ty) = kw.ty else {
                // Not defined yet: maybe by a later rule (checked below).
                continue;
            };
            let loaded = match &kw.load {
                None => Arc::new(Loaded::default()),
                Some(l) => {
                    let path = load_path(l, kw.state, &file, dirs);
                    let got = files.entry((path.clone(), ty)).or_insert_with(|| {
                        match std::fs::read_to_string(&path) {
                            Ok(text) => load_text(ty, &text)
                                .map(Arc::new)
                                .map_err(|(n, e)| format!("{}:{n}: {e}", path.display())),
                            // A state file not made yet is an empty set.
                            Err(e) if kw.state && e.kind() == std::io::ErrorKind::NotFound => {
                                Ok(Arc::new(Loaded::default()))
                            }
                            Err(e) => Err(format!("{}: {e}", path.display())),
                        }
                    });
                    match got {
                        Ok(l) => l.clone(),
                        Err(e) => {
                            err = Some(format!("dataset {}: {e}", kw.name));
                            break;
                        }
                    }
                }
            };
            by_name.insert(lname.clone(), sets.len());
            sets.push(SetInfo {
                ty,
                load: kw.load.clone(),
                save: kw.save.clone(),
                loaded,
                mutable: false,
                key: fnv(lname.as_bytes()),
            });
        }
        match err {
            Some(e) => refuse(r, e, warnings),
            None => true,
        }
    });
    // Second pass: every keyword names a defined set; mark changes.
    rules.retain_mut(|r| {
        let mut err = None;
        for kw in kws_mut(r) {
            match by_name.get(&kw.name.to_ascii_lowercase()) {
                Some(&i) => {
                    if matches!(kw.cmd, Cmd::Set | Cmd::Unset) {
                        sets[i].mutable = true;
                    }
                }
                None => {
                    err = Some(format!("dataset {} not defined (no type given)", kw.name));
                    break;
                }
            }
        }
        match err {
            Some(e) => refuse(r, e, warnings),
            None => true,
        }
    });
    // Third: attach the sets; deferred rules must be alert rules without
    // flow-variable changes (their keywords are decided after the verdicts).
    rules.retain_mut(|r| {
        for kw in kws_mut(r) {
            let i = by_name[&kw.name.to_ascii_lowercase()];
            let s = &sets[i];
            kw.ty = Some(s.ty);
            kw.deferred = s.mutable;
            kw.set = Some((i as u32, s.loaded.clone()));
        }
        if !deferred(r) {
            return true;
        }
        if r.action != Action::Alert {
            let a = if r.action == Action::Drop {
                "drop"
            } else {
                "pass"
            };
            return refuse(
                r,
                format!("a set that rules change, on a {a} rule (decided after the verdict)"),
                warnings,
            );
        }
        let bits = r.flowbits.iter().any(|f| {
            use crate::rules::payload::Flowbit;
            matches!(f, Flowbit::Set(_) | Flowbit::Unset(_) | Flowbit::Toggle(_))
        });
        if bits || r.flowints.iter().any(|f| f.op.changes()) {
            return refuse(
                r,
                "a set that rules change, with a flowbits or flowint change".into(),
                warnings,
            );
        }
        true
    });
    let uses: Vec<bool> = rules.iter().map(deferred).collect();
    Datasets {
        any_deferred: uses.iter().any(|&u| u),
        uses,
        sets,
        ..Datasets::default()
    }
}

/// A set's record: present or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec(bool);

impl Codec for Rec {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION).u8(self.0 as u8);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != VERSION {
            return Err(DecodeError("unknown ips dataset record version"));
        }
        Ok(Rec(r.u8()? != 0))
    }
}

impl Datasets {
    /// True if rule `rule` has keywords decided after the batch.
    #[inline]
    pub fn uses(&self, rule: u32) -> bool {
        self.uses.get(rule as usize).copied().unwrap_or(false)
    }

    /// Rule `rule` (sid `sid`) fired; its alert, if any, is `event`: logs
    /// the values its keywords saw on this packet (the last of each).
    pub fn fired(&mut self, sid: u32, event: Option<usize>) {
        let from = self.vals.len() as u32;
        SEEN.with(|s| {
            let mut s = s.borrow_mut();
            for &(rsid, set, cmd, digest, loaded) in s.iter().rev() {
                if rsid != sid {
                    continue;
                }
                let dup = self.vals[from as usize..]
                    .iter()
                    .any(|v| v.set == set && v.cmd == cmd);
                if !dup {
                    self.vals.push(Val {
                        set,
                        cmd,
                        digest,
                        loaded,
                    });
                }
            }
            s.retain(|e| e.0 != sid);
        });
        let to = self.vals.len() as u32;
        // Keyword order matters when one rule tests and changes one value.
        self.vals[from as usize..].reverse();
        self.log.push(Use { event, from, to });
    }

    /// Forgets the log (a batch starts).
    pub fn clear(&mut self) {
        self.log.clear();
        self.vals.clear();
    }

    fn key(&self, ns: Namespace, v: &Val) -> Key {
        let mut payload = [0u8; 40];
        payload[..8].copy_from_slice(&self.sets[v.set as usize].key.to_le_bytes());
        payload[8..].copy_from_slice(&v.digest);
        Key::new(ns, TABLE_DATASET, &payload)
    }

    /// Replays the batch's logged matches in order against the stored
    /// sets: adds to `withhold` the indices (in the batch's events) of the
    /// alerts of uses whose keywords do not hold, applies the changes and
    /// writes them.
    pub fn apply(
        &mut self,
        ns: Namespace,
        withhold: &mut Vec<usize>,
        store: &mut dyn StateStore,
    ) -> Result<(), StoreError> {
        if self.log.is_empty() {
            return Ok(());
        }
        self.recs.clear();
        self.slots.clear();
        for v in &self.vals {
            let k = self.recs.slot(self.key(ns, v));
            self.slots.push(k);
        }
        // A damaged record counts as none (the loaded values decide).
        self.recs.read(store)?;
        for u in &self.log {
            let mut holds = true;
            for at in u.from..u.to {
                let v = self.vals[at as usize];
                let k = self.slots[at as usize];
                let present = self.recs.get(k).map_or(v.loaded, |r| r.0);
                let ok = match v.cmd {
                    Cmd::IsSet => present,
                    Cmd::IsNotSet => !present,
                    Cmd::Set => {
                        if !present {
                            self.recs.set(k, Some(Rec(true)));
                            self.added += 1;
                        }
                        !present
                    }
                    Cmd::Unset => {
                        if present {
                            self.recs.set(k, Some(Rec(false)));
                        }
                        present
                    }
                    // Reputation sets are never changed, never deferred.
                    Cmd::Rep(..) => false,
                };
                holds &= ok;
            }
            if !holds {
                if let Some(e) = u.event {
                    withhold.push(e);
                }
            }
        }
        self.recs.write(store, |ops, _, key, rec, changed| {
            if let (true, Some(r)) = (changed, rec) {
                ops.put_value(key, r);
            }
        })?;
        self.clear();
        Ok(())
    }
}
