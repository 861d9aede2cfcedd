// The npm `openai` package on recorded answers: one process, fed many answers.
//
// Usage: node openai_node.mjs SDK_DIR   (SDK_DIR holds node_modules/openai)
// Reads one job per line on stdin: {"id", "route": "chat" | "responses", "body": the request,
// "status", "headers": [[name, value]…], "content": the answer's bytes in base64, "cut": whether
// the connection closed after them}; writes one
// line per job: {"id", "calls": [{"probe", "returned"?, "raised"?, "failure"?}…]}. Each call is
// one an app makes, served the recorded answer by a `fetch` of our own; `returned` holds the
// values apps read (text, finish reason, tool calls as [id, name, arguments]); Python judges
// them (wirediff.analysis.comparison.clients.node).
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const sdkDir = process.argv[2];
const { default: OpenAI, APIError } = await import(
  pathToFileURL(join(sdkDir, "node_modules", "openai", "index.mjs")).href
);
const HOP_BY_HOP = new Set(["content-encoding", "content-length", "transfer-encoding", "connection"]);
const PROMPT = [{ role: "user", content: "x" }];

// the bytes that came, then the error undici's fetch gives a body whose connection closed
function cut(bytes) {
  return new ReadableStream({
    start(controller) {
      if (bytes.length) controller.enqueue(new Uint8Array(bytes));
      controller.error(new TypeError("terminated"));
    },
  });
}

function clientFor(job) {
  const bytes = Buffer.from(job.content, "base64");
  const headers = new Headers();
  for (const [name, value] of job.headers) {
    if (!HOP_BY_HOP.has(name.toLowerCase())) {
      try {
        headers.append(name, value);
      } catch {
        // a header value fetch refuses is one a Node client never sees either
      }
    }
  }
  const empty = job.status === 204 || job.status === 205 || job.status === 304;
  return new OpenAI({
    apiKey: "sk-impact",
    baseURL: "http://wirediff.invalid/v1",
    maxRetries: 0,
    fetch: async () => new Response(empty ? null : job.cut ? cut(bytes) : bytes, { status: job.status, headers }),
  });
}

function where(error) {
  for (const line of String(error?.stack || "").split("\n").slice(1)) {
    const at = line.indexOf("node_modules/openai/");
    if (at >= 0) return line.slice(at + "node_modules/".length).replace(/\)$/, "").trim();
  }
  return "";
}

async function call(probe, run) {
  try {
    return { probe, returned: await run() };
  } catch (error) {
    if (error instanceof APIError) {
      const name = error.status ? error.constructor.name : "APIError";
      return { probe, raised: { class: name, message: String(error.message ?? "") } };
    }
    const first = String(error?.message ?? error).split("\n")[0].slice(0, 240);
    const kind = error?.constructor?.name || typeof error;
    return { probe, failure: { error: `raises ${kind}` + (first ? `: ${first}` : ""), where: where(error) } };
  }
}

function message(completion) {
  const choice = completion?.choices?.[0];
  if (!choice) return { choices: completion?.choices === undefined ? "missing" : "empty" };
  const msg = choice.message ?? {};
  return {
    content: msg.content,
    finish_reason: choice.finish_reason,
    tool_calls: (msg.tool_calls ?? []).map((c) => [c.id, c.function?.name, c.function?.arguments]),
    reasoning_content: msg.reasoning_content,
    usage: completion.usage == null ? "absent" : "present",
  };
}

function response(r) {
  const output = r?.output;
  return {
    output_text: r?.output_text,
    status: r?.status,
    output: Array.isArray(output) ? "list" : "missing",
    tool_calls: (Array.isArray(output) ? output : [])
      .filter((item) => item?.type === "function_call")
      .map((item) => [item.call_id, item.name, item.arguments]),
    usage: r?.usage == null ? "absent" : "present",
  };
}

function runnable(body, called) {
  return (body.tools ?? [])
    .filter((t) => t?.type === "function" && t.function?.name)
    .map((t) => ({
      type: "function",
      function: {
        name: t.function.name,
        parameters: t.function.parameters ?? {},
        parse: JSON.parse,
        function: (args) => {
          called.push(typeof args);
          return "ok";
        },
      },
    }));
}

async function chat(client, body) {
  const model = String(body.model ?? "m");
  const tools = Array.isArray(body.tools) ? { tools: body.tools } : {};
  const calls = [];
  if (!body.stream) {
    calls.push(
      await call("client.chat.completions.create()", async () =>
        message(await client.chat.completions.create({ model, messages: PROMPT, ...tools })),
      ),
    );
  } else {
    calls.push(
      await call("client.chat.completions.stream()", async () => {
        const stream = client.chat.completions.stream({ model, messages: PROMPT, ...tools });
        for await (const _ of stream) {
          // read it all, as an app does
        }
        return message(await stream.finalChatCompletion());
      }),
    );
  }
  if (tools.tools) {
    const called = [];
    const stream = body.stream ? { stream: true } : {};
    calls.push(
      await call("client.chat.completions.runTools()", async () => {
        const runner = client.chat.completions.runTools(
          { model, messages: PROMPT, tools: runnable(body, called), ...stream },
          { maxChatCompletions: 1 },
        );
        await runner.done();
        const answered = runner.messages.filter((m) => m.role === "tool");
        return {
          called: called.length,
          answered: answered.length,
          refused: answered.filter((m) => m.content !== "ok").map((m) => String(m.content).split("\n")[0].slice(0, 160)),
        };
      }),
    );
  }
  return calls;
}

async function responses(client, body) {
  const model = String(body.model ?? "m");
  const tools = Array.isArray(body.tools) ? { tools: body.tools } : {};
  if (!body.stream) {
    return [
      await call("client.responses.create()", async () =>
        response(await client.responses.create({ model, input: "x", ...tools })),
      ),
    ];
  }
  return [
    await call("client.responses.stream()", async () => {
      const stream = client.responses.stream({ model, input: "x", ...tools });
      for await (const _ of stream) {
        // read it all, as an app does
      }
      return response(await stream.finalResponse());
    }),
  ];
}

const ROUTES = { chat, responses };
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  const job = JSON.parse(line);
  let calls;
  try {
    calls = await ROUTES[job.route](clientFor(job), job.body ?? {});
  } catch (error) {
    calls = [{ probe: job.route, failure: { error: `harness: ${String(error?.message ?? error)}`, where: "" } }];
  }
  process.stdout.write(JSON.stringify({ id: job.id, calls }) + "\n");
}
