//! The page's style sheet, inline in its head; colours name GPU states the same way in the
//! drawing and in its legend.

pub const CSS: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px 24px;color:#1d2330;background:#fafbfc}\
h1{font-size:20px;margin:0}h1 .scheduler{font-weight:400;color:#556}\
h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}\
.meta{color:#667;margin:2px 0 0}.empty{color:#667;font-style:italic}\
table{border-collapse:collapse;background:#fff}th,td{padding:3px 8px;border-bottom:1px solid #eef;text-align:left;vertical-align:top}\
th{font-weight:600;color:#445;background:#f1f3f7}td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.reason{max-width:640px}td.nearest{max-width:360px;color:#445}.problem{color:#b3261e}\
.racks{display:flex;flex-wrap:wrap;gap:12px}.rack{background:#fff;border:1px solid #dde;border-radius:6px;padding:6px 8px}\
.rack h3{font-size:13px;margin:0 0 4px}.rack svg text{font:11px system-ui,sans-serif;fill:#334}\
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}\
.free{fill:#cfe8d4;background:#cfe8d4}.used{fill:#3b6fb6;background:#3b6fb6}.shared{fill:#8fb3e3;background:#8fb3e3}\
.tainted{fill:#d9534f;background:#d9534f}.held{fill:#e0a030;background:#e0a030}\
.cordoned{fill:#999}.bar-bg{fill:#e6e9ef}.bar{fill:#3b6fb6}.bar.over{fill:#e0a030}.bar-mark{stroke:#1d2330;stroke-width:1}\
";
