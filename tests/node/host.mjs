// An MCP host built on the TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
// ops/mcp/package.json): it starts a server over stdio, lists its tools, makes the calls of
// its plan and closes as the SDK closes (stdin closed, SIGTERM 2 s later, SIGKILL 2 s after).
// argv[2]: a JSON plan {"command", "args", "env", "calls": [{"name", "arguments"}], "hold"}.
// stdout, one JSON object a line: {"pid"}, {"tools"}, {"call", "result" | "error"}, {"closed"}.
// With "hold", it waits for a line on its stdin before closing.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.resolve(here, "..", "..", "ops", "mcp", "node_modules");
const sdk = (p) => pathToFileURL(path.join(modules, "@modelcontextprotocol", "sdk", "dist", "esm", p)).href;
const { Client } = await import(sdk("client/index.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");

const transport = new StdioClientTransport({
  command: plan.command,
  args: plan.args ?? [],
  env: plan.env,
  stderr: "inherit",
});
const client = new Client({ name: "toolgate-test-host", version: "1.0.0" });
await client.connect(transport);
say({ pid: transport.pid });
const listed = await client.listTools();
say({ tools: listed.tools });
for (const call of plan.calls ?? []) {
  try {
    const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} }, undefined, {
      timeout: call.timeout_ms ?? 60000,
    });
    say({ call: call.name, result });
  } catch (error) {
    say({ call: call.name, error: String(error && error.message ? error.message : error).split("\n")[0] });
  }
}
if (plan.hold) {
  await new Promise((resolve) => process.stdin.once("data", resolve));
}
await client.close();
say({ closed: true });
process.exit(0);
