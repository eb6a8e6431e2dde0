// The generated types and the problem classes match the spec, and the spec
// copy matches what the live server serves.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { problemClasses } from "../src/index.js";
import { servers } from "./servers.js";

const root = new URL("../../", import.meta.url);
const spec = JSON.parse(await readFile(new URL("openapi.json", root), "utf8"));

test("src/schema.ts is what npm run generate makes of openapi.json", async () => {
  const generator: string = new URL("scripts/generate.mjs", root).href;
  const { render } = await import(generator);
  const want: string = await render(new URL("openapi.json", root).pathname);
  const got = await readFile(new URL("src/schema.ts", root), "utf8");
  assert.ok(got === want, "src/schema.ts is stale: run npm run generate (or npm run generate:types) in clients/typescript");
});

test("a class for every problem type of x-problems, with its status", () => {
  const listed = new Map<string, number>(spec["x-problems"].map((p: { type: string; status: number }) => [p.type, p.status]));
  assert.deepEqual([...problemClasses.keys()].sort(), [...listed.keys()].sort());
  for (const [type, Class] of problemClasses) {
    const p = new Class({ type, title: "t", status: listed.get(type)! });
    assert.ok(p instanceof Class && p.problemName === type.replace("urn:racefree:problem:", ""), type);
  }
});

for (const s of servers) {
  test(`openapi.json is the document GET /openapi.json serves (${s.engine})`, async () => {
    const served = await (await fetch(`${s.url}/openapi.json`)).json();
    assert.deepEqual(served, spec);
  });
}
