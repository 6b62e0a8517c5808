// Compiles JSON schemas with Ajv as MCP hosts do, and says what fails.
// stdin: [{"name": ..., "schema": {...}}, ...]; stdout: {"<name>": null | "<the error>", ...}.
// Two validators: the TypeScript SDK client's own (Ajv's Draft 7 class, strict: false,
// ajv-formats; @modelcontextprotocol/sdk dist/cjs/validation/ajv-provider.js) and Ajv2020.
"use strict";
const path = require("node:path");
const modules = path.resolve(__dirname, "..", "..", "ops", "mcp", "node_modules");
const Ajv = require(path.join(modules, "ajv")).default;
const Ajv2020 = require(path.join(modules, "ajv", "dist", "2020")).default;
const addFormats = require(path.join(modules, "ajv-formats")).default;

function make(Kind) {
  const ajv = new Kind({ strict: false, validateFormats: true, validateSchema: false, allErrors: true });
  addFormats(ajv);
  return ajv;
}

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const out = {};
  for (const { name, schema } of JSON.parse(input)) {
    out[name] = null;
    for (const [label, Kind] of [["sdk", Ajv], ["2020", Ajv2020]]) {
      try {
        make(Kind).compile(schema);
      } catch (error) {
        out[name] = `${label}: ${String(error && error.message).split("\n")[0]}`;
        break;
      }
    }
  }
  process.stdout.write(JSON.stringify(out));
});
