//! Reading Muster's counters back from a Prometheus server, through its HTTP API
//! (`/api/v1/query`), each request with a deadline.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// How long one request may take, connection included.
const DEADLINE: Duration = Duration::from_secs(30);

/// A Prometheus server at `http://host:port[/prefix]`.
pub struct Prometheus {
    authority: String,
    prefix: String,
}

/// One time series of a range selector: its labels and (time, value) samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub labels: serde_json::Map<String, Value>,
    pub samples: Vec<(f64, f64)>,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

impl Prometheus {
    /// `url` as `http://host:port` with an optional path prefix; https is not spoken (reach
    /// an https server through `kubectl port-forward` or a local proxy).
    pub fn new(url: &str) -> Result<Prometheus, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--prometheus {url:?}: give an http:// address (for an https server, port-forward to it)")
        })?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        if authority.is_empty() {
            return Err(format!("--prometheus {url:?} names no host"));
        }
        let authority = if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
        let prefix = if prefix.is_empty() { String::new() } else { format!("/{}", prefix.trim_end_matches('/')) };
        Ok(Prometheus { authority, prefix })
    }

    /// The server's address, as given.
    pub fn address(&self) -> String {
        format!("http://{}{}", self.authority, self.prefix)
    }

    /// An instant query at `time`; the `data.result` array.
    pub async fn query(&self, query: &str, time: f64) -> Result<Vec<Value>, String> {
        let path = format!("{}/api/v1/query?query={}&time={time:.3}", self.prefix, encode(query));
        let answer = tokio::time::timeout(DEADLINE, self.get(&path))
            .await
            .map_err(|_| format!("Prometheus at {} did not answer {query:?} within {DEADLINE:?}", self.authority))??;
        if answer["status"] != "success" {
            return Err(format!(
                "Prometheus refused {query:?}: {}",
                answer["error"].as_str().unwrap_or("no reason given")
            ));
        }
        Ok(answer["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// The samples of a range selector (`metric[7d]`) as of `time`.
    pub async fn samples(&self, selector: &str, time: f64) -> Result<Vec<Series>, String> {
        let result = self.query(selector, time).await?;
        Ok(result
            .iter()
            .map(|series| Series {
                labels: series["metric"].as_object().cloned().unwrap_or_default(),
                samples: series["values"].as_array().into_iter().flatten().filter_map(sample).collect(),
            })
            .collect())
    }

    /// One number per series of an instant query, with its labels.
    pub async fn values(&self, query: &str, time: f64) -> Result<Vec<Series>, String> {
        let result = self.query(query, time).await?;
        Ok(result
            .iter()
            .map(|series| Series {
                labels: series["metric"].as_object().cloned().unwrap_or_default(),
                samples: sample(&series["value"]).into_iter().collect(),
            })
            .collect())
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let failed = |e: &dyn std::fmt::Display| format!("Prometheus at {}: {e}", self.authority);
        let stream = tokio::net::TcpStream::connect(&self.authority).await.map_err(|e| failed(&e))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| failed(&e))?;
        let driver = tokio::spawn(connection);
        let request = hyper::Request::get(path)
            .header("host", &self.authority)
            .body(Empty::<Bytes>::new())
            .map_err(|e| failed(&e))?;
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| failed(&e))?.to_bytes();
        driver.abort();
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| failed(&format!("answered {status} with something not JSON ({e})")))?;
        Ok(value)
    }
}

/// A `[time, "value"]` pair.
fn sample(pair: &Value) -> Option<(f64, f64)> {
    Some((pair[0].as_f64()?, pair[1].as_str()?.parse().ok()?))
}

/// Percent-encodes a query for a URL.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_with_their_port_and_prefix_and_https_is_refused_with_a_way_out() {
        let p = Prometheus::new("http://prometheus.monitoring:9090/prom/").unwrap();
        assert_eq!((p.authority.as_str(), p.prefix.as_str()), ("prometheus.monitoring:9090", "/prom"));
        assert_eq!(Prometheus::new("http://localhost").unwrap().authority, "localhost:80");
        let refused = Prometheus::new("https://prom.example").err().unwrap();
        assert!(refused.contains("port-forward"), "{refused}");
        assert_eq!(encode("a{b=\"c\"}[1h]"), "a%7Bb%3D%22c%22%7D%5B1h%5D");
    }
}
