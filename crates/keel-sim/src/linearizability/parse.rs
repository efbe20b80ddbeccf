//! Readers for the Jepsen history formats of the shared reference histories.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::history::{History, Key, Operation};
use super::model::{Append, AppendOp, AppendOutput, Register, RegisterOp, RegisterOutput, Value};

/// A line of a history file that could not be understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line number.
    pub line: usize,
    /// What was wrong with it.
    pub kind: ParseErrorKind,
}

/// What was wrong with a history line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The line does not have the expected shape; says what was expected.
    Syntax(String),
    /// The event type (`:invoke`, `:ok`, `:fail`, `:info`) is none of those.
    UnknownType(String),
    /// The operation (`:f`) is not one the model knows.
    UnknownFunction(String),
    /// The value does not fit the operation.
    BadValue(String),
    /// A process invoked an operation while its previous one was pending.
    AlreadyPending {
        /// The process.
        process: u64,
    },
    /// A process completed an operation it never invoked.
    NothingPending {
        /// The process.
        process: u64,
    },
    /// A completion names a different operation than its invocation.
    Mismatch {
        /// The invoked function.
        invoked: String,
        /// The completed function.
        completed: String,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        match &self.kind {
            ParseErrorKind::Syntax(what) => write!(f, "syntax error: {what}"),
            ParseErrorKind::UnknownType(t) => write!(f, "unknown event type {t:?}"),
            ParseErrorKind::UnknownFunction(func) => write!(f, "unknown operation {func:?}"),
            ParseErrorKind::BadValue(v) => write!(f, "bad value: {v}"),
            ParseErrorKind::AlreadyPending { process } => {
                write!(
                    f,
                    "process {process} invoked while an operation was pending"
                )
            }
            ParseErrorKind::NothingPending { process } => {
                write!(
                    f,
                    "process {process} completed an operation it never invoked"
                )
            }
            ParseErrorKind::Mismatch { invoked, completed } => {
                write!(
                    f,
                    "completion of {completed} does not match invocation of {invoked}"
                )
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// The kind of a Jepsen event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Invoke,
    /// Completed successfully.
    Ok,
    /// Definitely did not take effect (except a failed cas, which did not swap).
    Fail,
    /// Outcome unknown.
    Info,
}

impl EventType {
    fn parse(s: &str) -> Result<Self, ParseErrorKind> {
        match s {
            "invoke" => Ok(EventType::Invoke),
            "ok" => Ok(EventType::Ok),
            "fail" => Ok(EventType::Fail),
            "info" => Ok(EventType::Info),
            other => Err(ParseErrorKind::UnknownType(other.to_owned())),
        }
    }
}

/// Key given to the single register of a Jepsen etcd log.
pub const ETCD_KEY: &str = "etcd";

/// Reads a Jepsen etcd log (one register, starting as `nil`; times are line numbers).
///
/// Lines look like `INFO  jepsen.util - 3<TAB>:invoke<TAB>:cas<TAB>[3 0]`, fields separated
/// by any whitespace. `:ok` completes the process's pending operation; `:fail :cas` completes
/// a compare-and-set that did not swap; any other `:fail` means the operation did not happen
/// and it is dropped (this includes `:fail :read :timed-out`); `:info` leaves the outcome
/// unknown, as does reaching the end of the log with the operation pending.
#[expect(clippy::too_many_lines)]
pub fn parse_jepsen_etcd(text: &str) -> Result<History<Register>, ParseError> {
    let mut history = History::new();
    let mut pending: HashMap<u64, (u64, &str, RegisterOp)> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let err = |kind| ParseError { line, kind };
        if raw.trim().is_empty() {
            continue;
        }
        let event = parse_etcd_line(raw).map_err(err)?;
        let time = line as u64;
        let process = event.process;
        match event.kind {
            EventType::Invoke => {
                let input = match (event.f, event.value) {
                    ("read", _) => RegisterOp::Read,
                    ("write", EtcdValue::Single(v)) => RegisterOp::Write(v),
                    ("cas", EtcdValue::Pair(expected, new)) => RegisterOp::Cas { expected, new },
                    ("write" | "cas", v) => {
                        return Err(err(ParseErrorKind::BadValue(format!(
                            "{v:?} is not a valid argument of {}",
                            event.f
                        ))))
                    }
                    (f, _) => return Err(err(ParseErrorKind::UnknownFunction(f.to_owned()))),
                };
                if pending.insert(process, (time, event.f, input)).is_some() {
                    return Err(err(ParseErrorKind::AlreadyPending { process }));
                }
            }
            kind => {
                let Some((invoked_at, invoked_f, input)) = pending.remove(&process) else {
                    return Err(err(ParseErrorKind::NothingPending { process }));
                };
                if invoked_f != event.f {
                    return Err(err(ParseErrorKind::Mismatch {
                        invoked: invoked_f.to_owned(),
                        completed: event.f.to_owned(),
                    }));
                }
                let output = match (kind, input) {
                    (EventType::Ok, RegisterOp::Read) => match event.value {
                        EtcdValue::Single(v) => Some(RegisterOutput::Read(v)),
                        other => {
                            return Err(err(ParseErrorKind::BadValue(format!(
                                "{other:?} is not a register value"
                            ))))
                        }
                    },
                    (EventType::Ok, RegisterOp::Write(_)) => Some(RegisterOutput::Written),
                    (EventType::Ok, RegisterOp::Cas { .. }) => Some(RegisterOutput::CasOk),
                    (EventType::Fail, RegisterOp::Cas { .. }) => Some(RegisterOutput::CasFailed),
                    (EventType::Fail, _) => continue,
                    _ => None,
                };
                let key = ETCD_KEY;
                let op = match output {
                    Some(output) => {
                        Operation::returned(process, key, input, invoked_at, time, output)
                    }
                    None => Operation::unknown(process, key, input, invoked_at),
                };
                history
                    .push(op)
                    .map_err(|e| err(ParseErrorKind::Syntax(e.to_string())))?;
            }
        }
    }
    let mut still_pending: Vec<_> = pending.into_iter().collect();
    still_pending.sort_by_key(|&(process, (at, _, _))| (at, process));
    for (process, (at, _, input)) in still_pending {
        // Cannot fail: an unknown outcome has no return time to be out of order.
        let _ = history.push(Operation::unknown(process, ETCD_KEY, input, at));
    }
    Ok(history)
}

/// The value field of an etcd log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EtcdValue {
    Single(Value),
    Pair(Value, Value),
    TimedOut,
}

struct EtcdEvent<'a> {
    process: u64,
    kind: EventType,
    f: &'a str,
    value: EtcdValue,
}

fn parse_etcd_line<'a>(raw: &'a str) -> Result<EtcdEvent<'a>, ParseErrorKind> {
    let syntax = |what: &str| ParseErrorKind::Syntax(what.to_owned());
    let rest = raw
        .split_once(" - ")
        .map(|(_, rest)| rest)
        .ok_or_else(|| syntax("expected `INFO  jepsen.util - PROCESS :TYPE :F VALUE`"))?;
    let mut fields = rest.split_whitespace();
    let process = fields
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| syntax("expected a process number after ` - `"))?;
    let keyword = |field: Option<&'a str>, what: &str| {
        field
            .and_then(|k| k.strip_prefix(':'))
            .ok_or_else(|| syntax(what))
    };
    let kind = EventType::parse(keyword(
        fields.next(),
        "expected `:TYPE` after the process",
    )?)?;
    let f = keyword(fields.next(), "expected `:F` after the type")?;
    let value_text: Vec<&str> = fields.collect();
    let value = match value_text.as_slice() {
        [":timed-out"] => EtcdValue::TimedOut,
        [single] if !single.starts_with('[') => EtcdValue::Single(parse_etcd_value(single)?),
        [first, second] => {
            let a = first
                .strip_prefix('[')
                .ok_or_else(|| syntax("expected `[OLD NEW]`"))?;
            let b = second
                .strip_suffix(']')
                .ok_or_else(|| syntax("expected `[OLD NEW]`"))?;
            EtcdValue::Pair(parse_etcd_value(a)?, parse_etcd_value(b)?)
        }
        _ => {
            return Err(syntax(
                "expected a value: nil, a number, `[OLD NEW]` or :timed-out",
            ))
        }
    };
    Ok(EtcdEvent {
        process,
        kind,
        f,
        value,
    })
}

fn parse_etcd_value(text: &str) -> Result<Value, ParseErrorKind> {
    if text == "nil" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| ParseErrorKind::BadValue(format!("{text:?} is neither nil nor a number")))
}

/// Reads a Jepsen key-value history in EDN, one map per line, with string-append semantics
/// (times are line numbers).
///
/// Lines look like `{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`;
/// `:f` is `:get`, `:put` or `:append`, and a `:get` returning `nil` read the empty string.
/// `:ok` completes the process's pending operation, `:fail` drops it (it did not happen) and
/// `:info` leaves its outcome unknown, as does reaching the end with it pending.
#[expect(clippy::too_many_lines)]
pub fn parse_jepsen_kv(text: &str) -> Result<History<Append>, ParseError> {
    let mut history = History::new();
    let mut pending: HashMap<u64, (u64, Key, AppendOp)> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let err = |kind| ParseError { line, kind };
        if raw.trim().is_empty() {
            continue;
        }
        let map = parse_edn_map(raw).map_err(err)?;
        let field = |name: &str| {
            map.get(name)
                .ok_or_else(|| err(ParseErrorKind::Syntax(format!("missing :{name}"))))
        };
        let process = match field("process")? {
            Edn::Int(p) => u64::try_from(*p).ok(),
            _ => None,
        }
        .ok_or_else(|| err(ParseErrorKind::BadValue(":process must be a number".into())))?;
        let kind = match field("type")? {
            Edn::Keyword(t) => EventType::parse(t).map_err(err)?,
            _ => {
                return Err(err(ParseErrorKind::BadValue(
                    ":type must be a keyword".into(),
                )))
            }
        };
        let f = match field("f")? {
            Edn::Keyword(f) => f.as_str(),
            _ => return Err(err(ParseErrorKind::BadValue(":f must be a keyword".into()))),
        };
        let value = match field("value")? {
            Edn::Str(s) => Some(s.as_str()),
            Edn::Nil => None,
            _ => {
                return Err(err(ParseErrorKind::BadValue(
                    ":value must be a string".into(),
                )))
            }
        };
        let time = line as u64;
        match kind {
            EventType::Invoke => {
                let key = match field("key")? {
                    Edn::Str(k) => k.clone(),
                    Edn::Int(k) => k.to_string(),
                    _ => {
                        return Err(err(ParseErrorKind::BadValue(
                            ":key must be a string".into(),
                        )))
                    }
                };
                let arg = || {
                    value.map(str::to_owned).ok_or_else(|| {
                        err(ParseErrorKind::BadValue(format!(
                            ":{f} needs a string :value"
                        )))
                    })
                };
                let input = match f {
                    "get" => AppendOp::Get,
                    "put" => AppendOp::Put(arg()?),
                    "append" => AppendOp::Append(arg()?),
                    other => return Err(err(ParseErrorKind::UnknownFunction(other.to_owned()))),
                };
                if pending.insert(process, (time, key, input)).is_some() {
                    return Err(err(ParseErrorKind::AlreadyPending { process }));
                }
            }
            kind => {
                let Some((invoked_at, key, input)) = pending.remove(&process) else {
                    return Err(err(ParseErrorKind::NothingPending { process }));
                };
                let invoked_f = match input {
                    AppendOp::Get => "get",
                    AppendOp::Put(_) => "put",
                    AppendOp::Append(_) => "append",
                };
                if invoked_f != f {
                    return Err(err(ParseErrorKind::Mismatch {
                        invoked: invoked_f.to_owned(),
                        completed: f.to_owned(),
                    }));
                }
                let op = match kind {
                    EventType::Fail => continue,
                    EventType::Ok => {
                        let output = match input {
                            AppendOp::Get => AppendOutput::Get(value.unwrap_or_default().into()),
                            AppendOp::Put(_) | AppendOp::Append(_) => AppendOutput::Ok,
                        };
                        Operation::returned(process, key, input, invoked_at, time, output)
                    }
                    _ => Operation::unknown(process, key, input, invoked_at),
                };
                history
                    .push(op)
                    .map_err(|e| err(ParseErrorKind::Syntax(e.to_string())))?;
            }
        }
    }
    let mut still_pending: Vec<_> = pending.into_iter().collect();
    still_pending.sort_by_key(|(process, (at, _, _))| (*at, *process));
    for (process, (at, key, input)) in still_pending {
        // Cannot fail: an unknown outcome has no return time to be out of order.
        let _ = history.push(Operation::unknown(process, key, input, at));
    }
    Ok(history)
}

/// The EDN values that occur in the fields of a history line.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Edn {
    Nil,
    Int(i64),
    Str(String),
    Keyword(String),
}

/// Parses one flat EDN map with keyword keys (`{:a 1, :b "x"}`); nested collections are not
/// needed by the histories and are rejected.
fn parse_edn_map(text: &str) -> Result<BTreeMap<String, Edn>, ParseErrorKind> {
    let mut p = EdnParser { rest: text };
    p.skip_ws();
    p.expect('{')?;
    let mut map = BTreeMap::new();
    loop {
        p.skip_ws();
        if p.eat('}') {
            break;
        }
        let Edn::Keyword(key) = p.value()? else {
            return Err(ParseErrorKind::Syntax("map keys must be keywords".into()));
        };
        p.skip_ws();
        let value = p.value()?;
        if map.insert(key.clone(), value).is_some() {
            return Err(ParseErrorKind::Syntax(format!("duplicate key :{key}")));
        }
    }
    p.skip_ws();
    if !p.rest.is_empty() {
        return Err(ParseErrorKind::Syntax("text after the closing `}`".into()));
    }
    Ok(map)
}

struct EdnParser<'a> {
    rest: &'a str,
}

impl EdnParser<'_> {
    /// Skips whitespace and commas (which EDN treats as whitespace).
    fn skip_ws(&mut self) {
        self.rest = self
            .rest
            .trim_start_matches(|c: char| c.is_whitespace() || c == ',');
    }

    fn eat(&mut self, c: char) -> bool {
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ParseErrorKind> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(ParseErrorKind::Syntax(format!("expected `{c}`")))
        }
    }

    /// The text up to the next delimiter.
    fn token(&mut self) -> &str {
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || matches!(c, ',' | '}' | '{' | '[' | ']' | '"'))
            .unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        token
    }

    fn value(&mut self) -> Result<Edn, ParseErrorKind> {
        if self.eat('"') {
            return self.string().map(Edn::Str);
        }
        if self.eat(':') {
            let name = self.token();
            if name.is_empty() {
                return Err(ParseErrorKind::Syntax("empty keyword".into()));
            }
            return Ok(Edn::Keyword(name.to_owned()));
        }
        let token = self.token();
        match token {
            "nil" => Ok(Edn::Nil),
            "" => Err(ParseErrorKind::Syntax(format!(
                "expected a value at {:?}",
                self.rest.chars().take(10).collect::<String>()
            ))),
            _ => token
                .parse()
                .map(Edn::Int)
                .map_err(|_| ParseErrorKind::Syntax(format!("unsupported EDN value {token:?}"))),
        }
    }

    /// The rest of a string literal whose opening quote was consumed.
    fn string(&mut self) -> Result<String, ParseErrorKind> {
        let mut out = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[i + 1..];
                    return Ok(out);
                }
                '\\' => {
                    let escaped = match chars.next() {
                        Some((_, 'n')) => '\n',
                        Some((_, 't')) => '\t',
                        Some((_, 'r')) => '\r',
                        Some((_, '"')) => '"',
                        Some((_, '\\')) => '\\',
                        other => {
                            return Err(ParseErrorKind::Syntax(format!(
                                "unsupported string escape {other:?}"
                            )))
                        }
                    };
                    out.push(escaped);
                }
                c => out.push(c),
            }
        }
        Err(ParseErrorKind::Syntax("unterminated string".into()))
    }
}
