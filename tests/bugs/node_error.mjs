// What an app using the npm `openai` package sees when its request is refused: the error's
// class and message. Usage: node node_error.mjs SDK_DIR BASE_URL
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkDir, baseURL] = process.argv.slice(2);
const { default: OpenAI } = await import(
  pathToFileURL(join(sdkDir, "node_modules", "openai", "index.mjs")).href
);
const client = new OpenAI({ apiKey: "sk-premise", baseURL, maxRetries: 0 });
try {
  await client.chat.completions.create({
    model: "scenario-context-overflow",
    messages: [{ role: "user", content: "What is the weather in Paris?" }],
  });
  process.stdout.write(JSON.stringify({ class: "none", message: "" }));
} catch (error) {
  process.stdout.write(JSON.stringify({ class: error.constructor.name, message: String(error.message) }));
}
