// The calls every Node test makes with the README's `client`; prints what came back as JSON.
const model = "gpt-4o-mini";
const ask = [{ role: "user", content: "Say hi" }];
const out = {};
out.chat = (await client.chat.completions.create({ model, messages: ask })).choices[0].message.content;
out.chatChunks = 0;
const chunks = await client.chat.completions.create({
  model, messages: ask, stream: true, stream_options: { include_usage: true },
});
for await (const _ of chunks) out.chatChunks += 1;
out.responses = (await client.responses.create({ model, input: "Say hi" })).output_text;
out.responseEvents = [];
for await (const ev of await client.responses.create({ model, input: "Say hi", stream: true })) {
  out.responseEvents.push(ev.type);
}
out.models = (await client.models.list()).data.map((m) => m.id);
console.log(JSON.stringify(out));
