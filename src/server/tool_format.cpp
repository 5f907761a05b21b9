#include "server/tool_format.h"

#include <nlohmann/json.hpp>

namespace brioche::server {

ToolSyntax tool_syntax_for_template(const std::string& chat_template) {
  if (chat_template.find(kHermesFormat.call_open) != std::string::npos) return ToolSyntax::Hermes;
  if (chat_template.find(kLlama3JsonFormat.python_tag) != std::string::npos ||
      chat_template.find("ipython") != std::string::npos)
    return ToolSyntax::Llama3Json;
  return ToolSyntax::Hermes;
}

std::string tool_call_prefill(ToolSyntax syntax, const std::string* function_name) {
  const ToolFormat& format = tool_format(syntax);
  std::string open = format.call_open.empty() ? "" : std::string(format.call_open) + "\n";
  if (function_name != nullptr)
    open += "{\"name\": " + nlohmann::json(*function_name).dump() + ", \"" + std::string(format.arguments_key) + "\": ";
  return open;
}

std::string tool_call_suffix(ToolSyntax syntax) {
  const ToolFormat& format = tool_format(syntax);
  return format.call_close.empty() ? "" : "\n" + std::string(format.call_close);
}

}  // namespace brioche::server
