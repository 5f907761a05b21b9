// Errors returned to HTTP clients in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Every error the client causes is an ApiError with a 4xx status; only
// failures of the server itself become 500.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace brioche::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  nlohmann::json to_json() const {
    nlohmann::json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) error["param"] = param;
    if (!code.empty()) error["code"] = code;
    return {{"error", error}};
  }
};

inline ApiError invalid_param(std::string param, std::string message) {
  return ApiError{.status = 400,
                  .message = std::move(message),
                  .type = "invalid_request_error",
                  .param = std::move(param),
                  .code = "invalid_value"};
}

// An error with a status and message; type/param/code take their defaults.
inline ApiError status_error(int status, std::string message) {
  return ApiError{.status = status,
                  .message = std::move(message),
                  .type = status >= 500 ? "server_error" : "invalid_request_error",
                  .param = "",
                  .code = ""};
}

}  // namespace brioche::server
