// What a Node client does with a soft error: a 200 whose JSON body is an error (LM Studio's
// `{"error": "Unexpected endpoint or method. (POST /v1/responses)"}`). Run with BASE, MODEL,
// OPENAI_API_KEY and CLIENT (`openai-node` or `ai-sdk`); prints one JSON object: for each
// call, `raises <error name>` or `returns <what>`.
const { BASE, MODEL, CLIENT } = process.env;

async function outcome(call) {
  let got;
  try {
    got = await call();
  } catch (e) {
    return `raises ${e?.name ?? typeof e}`;
  }
  if (got === undefined || got === null || got === "" || (Array.isArray(got) && !got.length)) {
    return `returns ${JSON.stringify(got) ?? "undefined"}`;
  }
  return `returns a ${got?.constructor?.name ?? typeof got}`;
}

const out = {};
if (CLIENT === "openai-node") {
  const { default: OpenAI } = await import("openai");
  const client = new OpenAI({ baseURL: BASE, maxRetries: 0 });
  out["responses.create"] = await outcome(() => client.responses.create({ model: MODEL, input: "Hi" }));
  out["responses.create().output_text"] = await outcome(
    async () => (await client.responses.create({ model: MODEL, input: "Hi" })).output_text);
  out["responses.create({stream: true})"] = await outcome(async () => {
    const events = [];
    for await (const e of await client.responses.create({ model: MODEL, input: "Hi", stream: true })) events.push(e);
    return events;
  });
} else {
  const { createOpenAI } = await import("@ai-sdk/openai");
  const { generateText, streamText } = await import("ai");
  const model = createOpenAI({ baseURL: BASE, apiKey: process.env.OPENAI_API_KEY })(MODEL);
  out.generateText = await outcome(async () => (await generateText({ model, prompt: "Hi", maxRetries: 0 })).text);
  out.streamText = await outcome(async () => {
    let text = "";
    for await (const piece of streamText({ model, prompt: "Hi", maxRetries: 0, onError: () => {} }).textStream) text += piece;
    return text;
  });
}
console.log(JSON.stringify(out));
