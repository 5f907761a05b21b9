// A request the jobs layer refuses, with the HTTP status and OpenAI error
// fields the server answers with (server/api_error.h converts it).
#pragma once

#include <stdexcept>
#include <string>

namespace brioche::jobs {

class JobsError : public std::runtime_error {
 public:
  JobsError(int status, std::string code, std::string param, const std::string& message)
      : std::runtime_error(message), status(status), code(std::move(code)), param(std::move(param)) {}
  int status;
  std::string code;   // e.g. invalid_file, unknown_hyperparameter
  std::string param;  // the request field at fault, "" for none
};

}  // namespace brioche::jobs
