//! The script commands as parsed: `EVAL` and its kin, and `SCRIPT`. What runs them is
//! `crate::script`; parsing them is a command's business like any other's, so it lives here.

use bytes::Bytes;

use super::CommandError;

/// Which script an `EVAL`-like command runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptSource {
    /// `EVAL`: the script itself.
    Body(Bytes),
    /// `EVALSHA`: a script in the node's cache, by its SHA-1 (hex, any case).
    Sha(Bytes),
}

/// A script command, as parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptCommand {
    /// `EVAL | EVALSHA | EVAL_RO | EVALSHA_RO script numkeys [key ...] [arg ...]`.
    Eval {
        source: ScriptSource,
        keys: Vec<Bytes>,
        args: Vec<Bytes>,
        /// `_RO`: the script may not write.
        read_only: bool,
    },
    /// `SCRIPT LOAD script`: compiles and caches it, answers its SHA-1.
    Load(Bytes),
    /// `SCRIPT EXISTS sha [sha ...]`.
    Exists(Vec<Bytes>),
    /// `SCRIPT FLUSH [ASYNC | SYNC]`: empties this node's cache.
    Flush,
    /// `SCRIPT KILL`: stops the scripts running on this node.
    Kill,
    /// `EXEC` of a transaction that queued a script (`EVAL` and its kin, `SCRIPT LOAD | EXISTS
    /// | FLUSH`): the whole transaction runs as a script does (see `crate::script`). Never
    /// parsed: the session makes it at `EXEC`.
    Exec(Box<ScriptedExec>),
}

/// A transaction that queued a script, as `EXEC` hands it to the script runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedExec {
    /// Every queued request's arguments, in order.
    pub requests: Vec<Vec<Bytes>>,
    /// The replies of the requests answered when they were queued, each with its position.
    pub local_replies: Vec<(usize, keel_resp::Reply)>,
    /// The keys the connection watched, from the points it watched them at.
    pub watched: Vec<super::WatchedKey>,
}

impl ScriptCommand {
    /// Whether the command may run while a script is busy (only `SCRIPT KILL`).
    pub fn allowed_while_busy(&self) -> bool {
        matches!(self, ScriptCommand::Kill)
    }
}

/// Parses `EVAL`-like commands (`name` lowercase) and `SCRIPT`; `rest` is what follows the name
/// (arity checked by the command table).
pub(crate) fn parse_script(name: &str, rest: &[Bytes]) -> Result<ScriptCommand, CommandError> {
    let is = |arg: &Bytes, word: &str| arg.eq_ignore_ascii_case(word.as_bytes());
    match name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => {
            let numkeys = std::str::from_utf8(&rest[1])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or(CommandError::NotInteger)?;
            if numkeys < 0 {
                return Err(CommandError::Invalid("Number of keys can't be negative"));
            }
            let given = &rest[2..];
            if numkeys as u64 > given.len() as u64 {
                return Err(CommandError::Invalid(
                    "Number of keys can't be greater than number of args",
                ));
            }
            let (keys, args) = given.split_at(numkeys as usize);
            let source = if name.starts_with("evalsha") {
                ScriptSource::Sha(rest[0].clone())
            } else {
                ScriptSource::Body(rest[0].clone())
            };
            Ok(ScriptCommand::Eval {
                source,
                keys: keys.to_vec(),
                args: args.to_vec(),
                read_only: name.ends_with("_ro"),
            })
        }
        _ => match rest {
            [sub, body] if is(sub, "LOAD") => Ok(ScriptCommand::Load(body.clone())),
            [sub, shas @ ..] if is(sub, "EXISTS") && !shas.is_empty() => {
                Ok(ScriptCommand::Exists(shas.to_vec()))
            }
            [sub] if is(sub, "FLUSH") => Ok(ScriptCommand::Flush),
            [sub, mode] if is(sub, "FLUSH") && (is(mode, "ASYNC") || is(mode, "SYNC")) => {
                Ok(ScriptCommand::Flush)
            }
            [sub] if is(sub, "KILL") => Ok(ScriptCommand::Kill),
            [sub, ..]
                if ["LOAD", "EXISTS", "FLUSH", "KILL"]
                    .iter()
                    .any(|w| is(sub, w)) =>
            {
                Err(CommandError::WrongArity(format!(
                    "script|{}",
                    String::from_utf8_lossy(sub).to_lowercase()
                )))
            }
            [sub, ..] => Err(CommandError::UnknownSubcommand {
                command: "SCRIPT",
                subcommand: String::from_utf8_lossy(sub).into_owned(),
            }),
            [] => Err(CommandError::WrongArity("script".into())),
        },
    }
}
