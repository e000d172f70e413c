#include "dptrain/dist/init_method.h"

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"

namespace dpt::dist {

namespace {

const char* kForms = "use env://, tcp://HOST:PORT or file:///ABSOLUTE/PATH";

}  // namespace

InitMethod parse_init_method(const std::string& url) {
  InitMethod m;
  m.url = url;
  if (url == "env://") {
    m.kind = InitMethod::Kind::Env;
  } else if (starts_with(url, "tcp://")) {
    m.kind = InitMethod::Kind::Tcp;
    std::string rest = url.substr(6);
    // [v6::addr]:port or host:port
    size_t colon;
    if (!rest.empty() && rest[0] == '[') {
      size_t close = rest.find(']');
      DPT_CHECK(close != std::string::npos && close + 1 < rest.size() && rest[close + 1] == ':', ConfigError,
                "init method '", url, "': an IPv6 address needs the form tcp://[ADDR]:PORT");
      m.host = rest.substr(1, close - 1);
      colon = close + 1;
    } else {
      colon = rest.rfind(':');
      DPT_CHECK(colon != std::string::npos, ConfigError, "init method '", url, "' has no port; ", kForms);
      m.host = rest.substr(0, colon);
    }
    std::string port = rest.substr(colon + 1);
    DPT_CHECK(!m.host.empty(), ConfigError, "init method '", url, "' has no host; ", kForms);
    DPT_CHECK(!port.empty() && port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5,
              ConfigError, "init method '", url, "': port '", port, "' is not a number; ", kForms);
    m.port = std::stoi(port);
    DPT_CHECK(m.port > 0 && m.port < 65536, ConfigError, "init method '", url, "': port ", m.port,
              " is outside 1..65535");
  } else if (starts_with(url, "file://")) {
    m.kind = InitMethod::Kind::File;
    m.path = url.substr(7);
    DPT_CHECK(!m.path.empty() && m.path[0] == '/', ConfigError, "init method '", url,
              "' needs an absolute path (three slashes: file:///shared/path); ", kForms);
  } else {
    DPT_CHECK(false, ConfigError, "unknown init method '", url, "'; ", kForms);
  }
  return m;
}

}  // namespace dpt::dist
