// loopwatch for OpenCode: catches the agent in loops (the same call failing again and
// again, commands that do nothing). Written by `loopwatch install opencode`, removed by
// `loopwatch uninstall opencode`. Each tool call, result and prompt is judged by the
// command below; when it is missing or fails, the call goes through.
import { spawn } from "node:child_process";

const COMMAND = __COMMAND__;
const TIMEOUT_MS = 30000;

function ask(payload) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn("/bin/sh", ["-c", COMMAND], { stdio: ["pipe", "pipe", "ignore"] });
    } catch (e) {
      resolve({});
      return;
    }
    const timer = setTimeout(() => {
      child.kill();
      resolve({});
    }, TIMEOUT_MS);
    child.stdout.on("data", (data) => (out += data));
    child.on("error", () => {
      clearTimeout(timer);
      resolve({});
    });
    child.on("close", () => {
      clearTimeout(timer);
      try {
        const answer = JSON.parse(out.trim() || "{}");
        resolve(answer && typeof answer === "object" ? answer : {});
      } catch (e) {
        resolve({});
      }
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

export const Loopwatch = async ({ client, directory }) => {
  const tell = async (text) => {
    console.error(text);
    try {
      await client.tui.showToast({ body: { message: text, variant: "warning" } });
    } catch (e) {}
  };
  const endTurn = async (sessionID) => {
    try {
      await client.session.abort({ path: { id: sessionID } });
    } catch (e) {}
  };
  return {
    "chat.message": async (input, output) => {
      const text = (output.parts || [])
        .filter((part) => part.type === "text" && !part.synthetic)
        .map((part) => part.text)
        .join("\n");
      const answer = await ask({
        hook_event_name: "UserPromptSubmit",
        session_id: input.sessionID,
        prompt: text,
        cwd: directory,
      });
      if (answer.notice) await tell(answer.notice);
    },
    "tool.execute.before": async (input, output) => {
      const answer = await ask({
        hook_event_name: "PreToolUse",
        session_id: input.sessionID,
        tool_name: input.tool,
        tool_input: output.args,
        tool_use_id: input.callID,
        cwd: directory,
      });
      if (answer.notice) await tell(answer.notice);
      if (answer.deny) {
        if (answer.end_turn) {
          await tell(answer.deny);
          await endTurn(input.sessionID);
        }
        throw new Error(answer.deny);
      }
    },
    "tool.execute.after": async (input, output) => {
      const metadata = output.metadata || {};
      const answer = await ask({
        hook_event_name: "PostToolUse",
        session_id: input.sessionID,
        tool_name: input.tool,
        tool_input: input.args,
        tool_use_id: input.callID,
        tool_response: output.output,
        exit: metadata.exit,
        cwd: directory,
      });
      if (answer.notice) await tell(answer.notice);
      const extra = answer.stop || answer.context;
      if (extra) output.output = (output.output ? output.output + "\n\n" : "") + extra;
      if (answer.stop) {
        await tell(answer.stop);
        await endTurn(input.sessionID);
      }
    },
  };
};
