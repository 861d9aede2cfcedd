// The Vercel AI SDK (`ai` with `@ai-sdk/openai`): text, stream, tools with a second step,
// structured output; on the Responses API (the provider's default), or on chat completions
// (`openai.chat(model)`) with VERCEL_API=chat.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({ baseURL: process.env.BASE, apiKey: process.env.OPENAI_API_KEY });
const model = process.env.VERCEL_API === "chat" ? openai.chat(process.env.MODEL) : openai(process.env.MODEL);
const out = {};
out.text = (await generateText({ model, prompt: "Say hi", maxRetries: 0 })).text;
const stream = streamText({ model, prompt: "Say hi", maxRetries: 0 });
out.streamed = "";
for await (const piece of stream.textStream) out.streamed += piece;
const weather = tool({
  description: "The current weather in a city.",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny in ${city}`,
});
const called = await generateText({
  model, prompt: "What is the weather in Paris?", tools: { weather }, stopWhen: stepCountIs(2),
  maxRetries: 0,
});
out.steps = called.steps.length;
try {
  const city = await generateObject({
    model, prompt: "Describe Paris.", maxRetries: 0,
    schema: z.object({ name: z.string(), country: z.string(), population: z.number() }),
  });
  out.object = city.object !== undefined;
} catch (e) {
  out.object = e.name ?? String(e);
}
console.log(JSON.stringify(out));
