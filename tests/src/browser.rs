//! Headless Chromium for the console's tests: Debian's `chromium`, driven
//! through `chromedriver` (started here on a free loopback port, stopped on
//! drop) over WebDriver.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// Where Debian installs them (`apt-get install chromium chromium-driver`;
/// `.ci/run` does).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

pub struct Browser {
    pub client: Client,
    driver: Child,
    screenshots: PathBuf,
}

/// Where the console's tests write their screenshots:
/// `$ANKUSA_TEST_OUTPUT/console`, else `target/test-output/console`.
pub fn screenshot_dir() -> PathBuf {
    // A test binary runs from `<target>/<profile>/deps/`.
    let target = || {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.parent()?.parent()?.join("test-output"))
    };
    let base = std::env::var_os("ANKUSA_TEST_OUTPUT")
        .map(PathBuf::from)
        .or_else(target)
        .unwrap_or_else(|| std::env::temp_dir().join("ankusa-test-output"));
    base.join("console")
}

impl Browser {
    /// A browser window of `width` x `height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        Browser::start_with(width, height, &[]).await
    }

    /// A browser window of `width` x `height`, Chromium given `args` too
    /// (`--host-resolver-rules=...`: names that resolve where a test says).
    pub async fn start_with(width: u32, height: u32, args: &[&str]) -> Browser {
        for program in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(program).exists(),
                "{program} is missing: apt-get install chromium chromium-driver (.ci/run installs them)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut chromium_args: Vec<String> =
            ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
                .into_iter()
                .map(str::to_string)
                .collect();
        chromium_args.push(format!("--window-size={width},{height}"));
        chromium_args.push("--hide-scrollbars".into());
        chromium_args.extend(args.iter().map(|a| a.to_string()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": chromium_args,
            },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!("an object literal") };
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => break client,
                Err(e) if started.elapsed() > Duration::from_secs(30) => panic!("no WebDriver session: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let screenshots = screenshot_dir();
        std::fs::create_dir_all(&screenshots).expect("screenshot dir");
        Browser { client, driver, screenshots }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Run `script` (a function body) in the page; its return value.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("script failed ({e}): {script}"))
    }

    /// Wait until `expression` is truthy in the page.
    pub async fn until(&self, what: &str, expression: &str) {
        let started = Instant::now();
        loop {
            let value = self.client.execute(&format!("return !!({expression});"), vec![]).await;
            if matches!(value, Ok(Value::Bool(true))) {
                return;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let page = self.js("return document.body.innerText").await;
                panic!("timed out waiting for {what} ({expression}); the page says:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The visible text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.text().await.unwrap_or_default()
    }

    pub async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.click().await.unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.clear().await.unwrap_or_else(|e| panic!("clear `{css}`: {e}"));
        element.send_keys(text).await.unwrap_or_else(|e| panic!("type into `{css}`: {e}"));
    }

    /// Choose `value` in the `<select>` matching `css`.
    pub async fn choose(&self, css: &str, value: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.select_by_value(value).await.unwrap_or_else(|e| panic!("choose {value} in `{css}`: {e}"));
    }

    /// Save the page as `<name>.png` in the screenshot folder; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let path = self.screenshots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    pub async fn resize(&self, width: u32, height: u32) {
        self.client.set_window_size(width, height).await.expect("resize the window");
    }

    /// End the session; dropping the browser stops chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
