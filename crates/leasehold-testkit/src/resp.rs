//! Just enough RESP2 to send one command and read its reply, as text or as
//! a [`Value`].

use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// A simple string or an integer, as sent.
    Line(String),
    /// An error reply, without its leading `-`.
    Error(String),
    Bulk(String),
    Nil,
    Array(Vec<Value>),
}

impl Value {
    /// The text [`RedisServer::command`](crate::RedisServer::command)
    /// returns for this reply.
    pub(crate) fn render(&self) -> String {
        match self {
            Value::Line(text) | Value::Bulk(text) => text.clone(),
            Value::Error(message) => format!("(error) {message}"),
            Value::Nil => "(nil)".to_owned(),
            Value::Array(items) => items
                .iter()
                .map(Value::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// A string reply's text; `None` for errors, nil and arrays.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Value::Line(text) | Value::Bulk(text) => Some(text),
            Value::Error(_) | Value::Nil | Value::Array(_) => None,
        }
    }

    /// An array's items; empty for anything else.
    pub(crate) fn items(&self) -> &[Value] {
        match self {
            Value::Array(items) => items,
            _ => &[],
        }
    }

    /// The value after `field` in a flat `field value field value …` array,
    /// as `SENTINEL REPLICAS` sends each replica.
    pub(crate) fn field(&self, field: &str) -> Option<&str> {
        self.items()
            .chunks(2)
            .find(|pair| pair.first().and_then(Value::text) == Some(field))
            .and_then(|pair| pair.get(1))
            .and_then(Value::text)
    }
}

/// Sends `args` as one command to `addr` on a fresh connection and renders
/// the reply (see [`RedisServer::command`](crate::RedisServer::command)).
pub(crate) fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<String> {
    command_value(addr, args, timeout).map(|value| value.render())
}

/// Sends `args` as one command to `addr` on a fresh connection and reads
/// the reply.
pub(crate) fn command_value(
    addr: SocketAddr,
    args: &[&str],
    timeout: Duration,
) -> io::Result<Value> {
    let mut replies = pipeline(addr, &[args], timeout)?;
    replies.pop().ok_or_else(|| malformed("no reply"))
}

/// Sends `commands` on one fresh connection, all at once, and reads their
/// replies in order: one connection for what a poll asks a server.
pub(crate) fn pipeline(
    addr: SocketAddr,
    commands: &[&[&str]],
    timeout: Duration,
) -> io::Result<Vec<Value>> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request: Vec<u8> = commands.iter().flat_map(|args| encode(args)).collect();
    (&stream).write_all(&request)?;
    let mut reader = BufReader::new(&stream);
    commands.iter().map(|_| read_value(&mut reader)).collect()
}

/// A RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply: strings and integers as they are, errors as
/// `(error) MESSAGE`, nil as `(nil)`, array elements one per line.
#[cfg(test)]
pub(crate) fn render(reader: &mut impl BufRead) -> io::Result<String> {
    read_value(reader).map(|value| value.render())
}

/// Reads one reply.
pub(crate) fn read_value(reader: &mut impl BufRead) -> io::Result<Value> {
    let line = read_line(reader)?;
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    match kind {
        "+" | ":" => Ok(Value::Line(rest.to_owned())),
        "-" => Ok(Value::Error(rest.to_owned())),
        "$" => match length(rest)? {
            None => Ok(Value::Nil),
            Some(len) => {
                let mut bytes = vec![0; len + 2];
                reader.read_exact(&mut bytes)?;
                bytes.truncate(len);
                Ok(Value::Bulk(String::from_utf8_lossy(&bytes).into_owned()))
            }
        },
        "*" => match length(rest)? {
            None => Ok(Value::Nil),
            Some(count) => (0..count)
                .map(|_| read_value(reader))
                .collect::<io::Result<Vec<_>>>()
                .map(Value::Array),
        },
        _ => Err(malformed(&line)),
    }
}

/// A line without its `\r\n`; EOF before one is an error.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut bytes = Vec::new();
    reader.read_until(b'\n', &mut bytes)?;
    if !bytes.ends_with(b"\r\n") {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed in the middle of a reply",
        ));
    }
    bytes.truncate(bytes.len() - 2);
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A bulk or array length; `-1` is nil.
fn length(text: &str) -> io::Result<Option<usize>> {
    if text == "-1" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| malformed(text))
}

fn malformed(text: &str) -> io::Error {
    io::Error::new(
        ErrorKind::InvalidData,
        format!("malformed RESP reply: {text:?}"),
    )
}
