#include "text/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <ranges>
#include <vector>

#include "common/error.h"
#include "common/file_io.h"

namespace fleet::text {
namespace {

using nlohmann::json;

json undefined() { return json(json::value_t::discarded); }
bool is_undefined(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (v.is_discarded() || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

std::string to_text(const json& v);

// Python's repr() of a value inside a list or dict.
std::string python_repr(const json& v) {
  if (v.is_string()) {
    std::string out = "'";
    for (char c : v.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  return to_text(v);
}

// How Jinja (Python) prints a value.
std::string to_text(const json& v) {
  if (v.is_discarded()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) == d && std::abs(d) < 1e16) return json(static_cast<std::int64_t>(d)).dump() + ".0";
    return v.dump();
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false)
      out += (first ? "" : ", ") + python_repr(it.key()) + ": " + python_repr(it.value());
    return out + "}";
  }
  return v.dump();
}

// What Python's json.dumps writes (transformers' tojson: ensure_ascii off,
// separators ", " and ": ", `indent` spaces per level when given). Keys come
// in sorted order: a parsed object keeps no other.
void append_json_text(std::string& out, const json& v, int indent, int depth) {
  const auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(indent * level), ' ');
  };
  if (v.is_discarded()) {
    out += "null";
  } else if (v.is_array() || v.is_object()) {
    const bool array = v.is_array();
    out += array ? '[' : '{';
    if (!v.empty()) {
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it, first = false) {
        if (!first) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        if (!array) out += json(it.key()).dump() + ": ";
        append_json_text(out, it.value(), indent, depth + 1);
      }
      newline(depth);
    }
    out += array ? ']' : '}';
  } else {
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

// ---- tokens of an expression ------------------------------------------------

struct Token {
  enum Kind { kName, kNumber, kString, kOp, kEnd } kind;
  std::string text;
};

std::vector<Token> lex_expression(std::string_view s, const std::string& where) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::kName, std::string(s.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
      out.push_back({Token::kNumber, std::string(s.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string text;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          text += s[j];
        }
      }
      if (j >= s.size()) throw InputError(where + ": unterminated string");
      out.push_back({Token::kString, text});
      i = j + 1;
    } else {
      static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%",
                                   "~",  "(",  ")",  "[",  "]",  "{",  "}", ".", ",", ":", "|", "="};
      bool found = false;
      for (const char* op : kOps) {
        const std::size_t n = std::char_traits<char>::length(op);
        if (s.substr(i, n) == op) {
          out.push_back({Token::kOp, op});
          i += n;
          found = true;
          break;
        }
      }
      if (!found) throw InputError(where + ": unexpected character '" + std::string(1, c) + "'");
    }
  }
  out.push_back({Token::kEnd, ""});
  return out;
}

// ---- expressions --------------------------------------------------------------

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kNot,
    kConditional
  } kind;
  json value;                 ///< literal
  std::string name;           ///< name, attribute, filter, test, operator
  std::vector<ExprPtr> args;  ///< operands, call arguments (positional)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  ///< `is not`, `not in`
};

ExprPtr make(Expr::Kind kind, std::string name = "", std::vector<ExprPtr> args = {}) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->name = std::move(name);
  e->args = std::move(args);
  return e;
}

class ExpressionParser {
 public:
  ExpressionParser(std::vector<Token> tokens, std::string where) : t_(std::move(tokens)), where_(std::move(where)) {}

  ExprPtr parse_all() {
    auto e = expression();
    expect_end();
    return e;
  }
  ExprPtr expression() { return conditional(); }
  /// An expression without a trailing inline `if` (a for loop's iterable, whose `if` filters).
  ExprPtr expression_without_condition() { return logical_or(); }
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  bool accept(const std::string& text) {
    if ((peek().kind == Token::kOp || peek().kind == Token::kName) && peek().text == text) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(const std::string& text) {
    if (!accept(text)) fail("expected '" + text + "'");
  }
  std::string name() {
    if (peek().kind != Token::kName) fail("expected a name");
    return t_[pos_++].text;
  }
  void expect_end() {
    if (peek().kind != Token::kEnd) fail("unexpected '" + peek().text + "'");
  }
  [[noreturn]] void fail(const std::string& why) const { throw InputError(where_ + ": " + why); }

 private:
  ExprPtr conditional() {
    auto value = logical_or();
    if (peek().kind == Token::kName && peek().text == "if") {
      ++pos_;
      auto condition = logical_or();
      ExprPtr otherwise = make(Expr::kLiteral);
      otherwise->value = undefined();
      if (accept("else")) otherwise = conditional();
      return make(Expr::kConditional, "", {condition, value, otherwise});
    }
    return value;
  }
  ExprPtr logical_or() {
    auto left = logical_and();
    while (accept("or")) left = make(Expr::kOr, "", {left, logical_and()});
    return left;
  }
  ExprPtr logical_and() {
    auto left = logical_not();
    while (accept("and")) left = make(Expr::kAnd, "", {left, logical_not()});
    return left;
  }
  ExprPtr logical_not() {
    if (accept("not")) return make(Expr::kNot, "", {logical_not()});
    return comparison();
  }
  ExprPtr comparison() {
    auto left = concatenation();
    while (true) {
      if (peek().kind == Token::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                        peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const auto op = t_[pos_++].text;
        left = make(Expr::kBinary, op, {left, concatenation()});
      } else if (peek().kind == Token::kName && peek().text == "in") {
        ++pos_;
        left = make(Expr::kBinary, "in", {left, concatenation()});
      } else if (peek().kind == Token::kName && peek().text == "not" && peek(1).text == "in") {
        pos_ += 2;
        auto e = make(Expr::kBinary, "in", {left, concatenation()});
        e->negated = true;
        left = e;
      } else if (accept("is")) {
        auto e = make(Expr::kTest, "", {left});
        e->negated = accept("not");
        e->name = name();
        if (peek().kind == Token::kOp && peek().text == "(") call_arguments(*e);
        left = e;
      } else {
        return left;
      }
    }
  }
  ExprPtr concatenation() {
    auto left = additive();
    while (peek().kind == Token::kOp && peek().text == "~") {
      ++pos_;
      left = make(Expr::kBinary, "~", {left, additive()});
    }
    return left;
  }
  ExprPtr additive() {
    auto left = multiplicative();
    while (peek().kind == Token::kOp && (peek().text == "+" || peek().text == "-")) {
      const auto op = t_[pos_++].text;
      left = make(Expr::kBinary, op, {left, multiplicative()});
    }
    return left;
  }
  ExprPtr multiplicative() {
    auto left = unary();
    while (peek().kind == Token::kOp &&
           (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
      const auto op = t_[pos_++].text;
      left = make(Expr::kBinary, op, {left, unary()});
    }
    return left;
  }
  ExprPtr unary() {
    if (peek().kind == Token::kOp && peek().text == "-") {
      ++pos_;
      return make(Expr::kUnary, "-", {unary()});
    }
    return postfix(primary());
  }
  void call_arguments(Expr& e) {
    expect("(");
    if (accept(")")) return;
    do {
      if (peek().kind == Token::kName && peek(1).kind == Token::kOp && peek(1).text == "=") {
        auto key = name();
        ++pos_;
        e.kwargs.emplace_back(key, expression());
      } else {
        e.args.push_back(expression());
      }
    } while (accept(","));
    expect(")");
  }
  ExprPtr postfix(ExprPtr value) {
    while (true) {
      if (accept(".")) {
        value = make(Expr::kAttr, name(), {value});
      } else if (peek().kind == Token::kOp && peek().text == "[") {
        ++pos_;
        ExprPtr start, stop;
        if (!(peek().kind == Token::kOp && peek().text == ":")) start = expression();
        if (accept(":")) {
          if (!(peek().kind == Token::kOp && peek().text == "]")) stop = expression();
          expect("]");
          auto e = make(Expr::kSlice, "", {value, start, stop});
          value = e;
        } else {
          expect("]");
          value = make(Expr::kIndex, "", {value, start});
        }
      } else if (peek().kind == Token::kOp && peek().text == "(") {
        auto e = make(Expr::kCall, "", {value});
        call_arguments(*e);
        value = e;
      } else if (accept("|")) {
        auto e = make(Expr::kFilter, name(), {value});
        if (peek().kind == Token::kOp && peek().text == "(") call_arguments(*e);
        value = e;
      } else {
        return value;
      }
    }
  }
  ExprPtr primary() {
    const Token tok = peek();
    ++pos_;
    if (tok.kind == Token::kString) {
      auto e = make(Expr::kLiteral);
      e->value = tok.text;
      while (peek().kind == Token::kString) e->value = e->value.get<std::string>() + t_[pos_++].text;  // "a" "b"
      return e;
    }
    if (tok.kind == Token::kNumber) {
      auto e = make(Expr::kLiteral);
      e->value = tok.text.find('.') != std::string::npos ? json(std::stod(tok.text)) : json(std::stoll(tok.text));
      return e;
    }
    if (tok.kind == Token::kName) {
      if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
        auto e = make(Expr::kLiteral);
        e->value = tok.text == "true" || tok.text == "True";
        return e;
      }
      if (tok.text == "none" || tok.text == "None") return make(Expr::kLiteral);
      return make(Expr::kName, tok.text);
    }
    if (tok.kind == Token::kOp && tok.text == "(") {
      auto e = expression();
      expect(")");
      return e;
    }
    if (tok.kind == Token::kOp && tok.text == "[") {
      auto e = make(Expr::kList);
      if (!accept("]")) {
        do e->args.push_back(expression());
        while (accept(","));
        expect("]");
      }
      return e;
    }
    if (tok.kind == Token::kOp && tok.text == "{") {
      auto e = make(Expr::kDict);
      if (!accept("}")) {
        do {
          auto key = expression();
          expect(":");
          e->args.push_back(key);
          e->args.push_back(expression());
        } while (accept(","));
        expect("}");
      }
      return e;
    }
    fail("unexpected '" + tok.text + "'");
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0;
  std::string where_;
};

// ---- statements ----------------------------------------------------------------

struct Node {
  enum Kind { kText, kOutput, kFor, kIf, kSet } kind;
  std::string text;                                             ///< text
  ExprPtr expr;                                                 ///< output, for iterable, set value
  std::vector<std::string> targets;                             ///< for variables; set: name or namespace + attribute
  ExprPtr filter;                                               ///< for ... if filter
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  ///< if: (condition or null for else, body)
  std::vector<Node> body, otherwise;                            ///< for body and else
};

struct Tag {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string content;
  std::size_t offset;
};

// Splits a template into text, {{ }} and {% %}, applying whitespace control,
// trim_blocks and lstrip_blocks as transformers configures Jinja.
std::vector<Tag> split_tags(std::string_view s, const std::string& source) {
  std::vector<Tag> out;
  std::size_t i = 0;
  bool strip_next = false, trim_newline = false;
  while (i <= s.size()) {
    const std::size_t open = s.find('{', i);
    std::size_t tag = std::string::npos;
    for (std::size_t p = open; p != std::string::npos && p + 1 < s.size(); p = s.find('{', p + 1))
      if (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#') {
        tag = p;
        break;
      }
    std::string text(s.substr(i, tag == std::string::npos ? std::string::npos : tag - i));
    const char kind = tag == std::string::npos ? 0 : s[tag + 1];
    const bool strip_before = kind && tag + 2 < s.size() && s[tag + 2] == '-';
    const bool keep_before = kind && tag + 2 < s.size() && s[tag + 2] == '+';
    if (strip_before) {
      const auto last = text.find_last_not_of(" \t\r\n");
      text.erase(last == std::string::npos ? 0 : last + 1);
    } else if ((kind == '%' || kind == '#') && !keep_before) {
      // lstrip_blocks: spaces and tabs between a line's start and a block tag go.
      const auto newline = text.find_last_of('\n');
      const auto from = newline == std::string::npos ? 0 : newline + 1;
      const bool line_start = newline != std::string::npos || i == 0;
      if (line_start && text.find_first_not_of(" \t", from) == std::string::npos) text.erase(from);
    }
    if (trim_newline && !text.empty() && text[0] == '\n') text.erase(0, 1);  // trim_blocks
    if (strip_next) {
      const auto first = text.find_first_not_of(" \t\r\n");
      text.erase(0, first == std::string::npos ? text.size() : first);
    }
    if (tag == std::string::npos) {
      if (!text.empty()) out.push_back({Tag::kText, text, i});
      break;
    }
    if (!text.empty()) out.push_back({Tag::kText, text, i});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    // The closing delimiter, outside string literals.
    std::size_t j = tag + 2;
    char quote = 0;
    for (; j + 1 < s.size(); ++j) {
      if (quote) {
        if (s[j] == '\\')
          ++j;
        else if (s[j] == quote)
          quote = 0;
      } else if (kind != '#' && (s[j] == '\'' || s[j] == '"')) {
        quote = s[j];
      } else if (s.substr(j, 2) == close) {
        break;
      }
    }
    if (j + 1 >= s.size())
      throw InputError(source + ": a tag opened at byte " + std::to_string(tag) + " is never closed");
    std::size_t content_begin = tag + 2 + ((strip_before || keep_before) ? 1 : 0), content_end = j;
    strip_next = content_end > content_begin && s[content_end - 1] == '-';
    if (strip_next) --content_end;
    if (kind != '#')
      out.push_back({kind == '{' ? Tag::kExpr : Tag::kStmt,
                     std::string(s.substr(content_begin, content_end - content_begin)), tag});
    trim_newline = kind != '{';  // trim_blocks
    i = j + 2;
  }
  return out;
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Tag> tags, std::string source) : tags_(std::move(tags)), source_(std::move(source)) {}

  std::vector<Node> parse_all() {
    std::string end;
    auto nodes = block({}, end);
    return nodes;
  }

 private:
  std::string where(const Tag& t) const {
    return source_ + ": tag at byte " + std::to_string(t.offset) + " ('" + t.content + "')";
  }

  // Nodes until a statement whose keyword is in `stops` (returned in `stop`).
  std::vector<Node> block(const std::vector<std::string>& stops, std::string& stop) {
    std::vector<Node> nodes;
    while (pos_ < tags_.size()) {
      const Tag& tag = tags_[pos_++];
      if (tag.kind == Tag::kText) {
        nodes.push_back(Node{Node::kText, tag.content, nullptr, {}, nullptr, {}, {}, {}});
        continue;
      }
      if (tag.kind == Tag::kExpr) {
        Node n{Node::kOutput, "", nullptr, {}, nullptr, {}, {}, {}};
        n.expr = ExpressionParser(lex_expression(tag.content, where(tag)), where(tag)).parse_all();
        nodes.push_back(std::move(n));
        continue;
      }
      ExpressionParser p(lex_expression(tag.content, where(tag)), where(tag));
      const std::string keyword = p.peek().kind == Token::kName ? p.name() : "";
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        stop = keyword;
        rest_ = std::make_shared<ExpressionParser>(std::move(p));
        return nodes;
      }
      if (keyword == "if") {
        Node n{Node::kIf, "", nullptr, {}, nullptr, {}, {}, {}};
        auto condition = p.expression();
        p.expect_end();
        while (true) {
          std::string end;
          auto body = block({"elif", "else", "endif"}, end);
          if (end.empty()) throw InputError(where(tag) + ": no {% endif %}");
          n.branches.emplace_back(condition, std::move(body));
          if (end == "endif") break;
          if (end == "else") {
            rest_->expect_end();
            std::string last;
            auto otherwise = block({"endif"}, last);
            if (last.empty()) throw InputError(where(tag) + ": no {% endif %}");
            n.branches.emplace_back(nullptr, std::move(otherwise));
            break;
          }
          condition = rest_->expression();
          rest_->expect_end();
        }
        nodes.push_back(std::move(n));
      } else if (keyword == "for") {
        Node n{Node::kFor, "", nullptr, {}, nullptr, {}, {}, {}};
        n.targets.push_back(p.name());
        while (p.accept(",")) n.targets.push_back(p.name());
        p.expect("in");
        n.expr = p.expression_without_condition();
        if (p.accept("if")) n.filter = p.expression();
        p.expect_end();
        std::string end;
        n.body = block({"else", "endfor"}, end);
        if (end.empty()) throw InputError(where(tag) + ": no {% endfor %}");
        if (end == "else") {
          std::string last;
          n.otherwise = block({"endfor"}, last);
          if (last.empty()) throw InputError(where(tag) + ": no {% endfor %}");
        }
        nodes.push_back(std::move(n));
      } else if (keyword == "set") {
        Node n{Node::kSet, "", nullptr, {}, nullptr, {}, {}, {}};
        n.targets.push_back(p.name());
        if (p.accept(".")) n.targets.push_back(p.name());
        p.expect("=");
        n.expr = p.expression();
        p.expect_end();
        nodes.push_back(std::move(n));
      } else if (keyword == "generation" || keyword == "endgeneration") {
        // transformers' marker of assistant text: no output of its own.
      } else {
        throw InputError(where(tag) + ": unsupported statement '" + keyword + "'");
      }
    }
    stop.clear();
    return nodes;
  }

  std::vector<Tag> tags_;
  std::string source_;
  std::size_t pos_ = 0;
  std::shared_ptr<ExpressionParser> rest_;  ///< the stop statement's remaining tokens
};

// ---- rendering ------------------------------------------------------------------

class Renderer {
 public:
  Renderer(const json& globals, std::string source) : source_(std::move(source)) { scopes_.push_back(globals); }

  void run(const std::vector<Node>& nodes, std::string& out) {
    for (const auto& n : nodes) {
      switch (n.kind) {
        case Node::kText:
          out += n.text;
          break;
        case Node::kOutput:
          out += to_text(eval(*n.expr));
          break;
        case Node::kIf:
          for (const auto& [condition, body] : n.branches)
            if (!condition || truthy(eval(*condition))) {
              run(body, out);
              break;
            }
          break;
        case Node::kSet:
          if (n.targets.size() == 1) {
            scopes_.back()[n.targets[0]] = eval(*n.expr);
          } else {
            json* ns = find(n.targets[0]);
            if (!ns || !ns->is_object()) fail("'" + n.targets[0] + "' is not a namespace");
            (*ns)[n.targets[1]] = eval(*n.expr);
          }
          break;
        case Node::kFor:
          run_for(n, out);
          break;
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw InputError(source_ + ": " + why); }

  json* find(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &*f;
    }
    return nullptr;
  }

  void run_for(const Node& n, std::string& out) {
    json items = eval(*n.expr);
    std::vector<json> list;
    if (items.is_array()) {
      list.assign(items.begin(), items.end());
    } else if (items.is_object()) {
      for (auto it = items.begin(); it != items.end(); ++it) list.push_back(it.key());
    } else if (items.is_string()) {
      for (char c : items.get<std::string>()) list.push_back(std::string(1, c));
    } else if (!is_undefined(items) && !items.is_null()) {
      fail("cannot loop over " + to_text(items));
    }
    auto bind = [&](const json& item) {
      json scope = json::object();
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
      } else {
        if (!item.is_array() || item.size() != n.targets.size()) fail("cannot unpack a loop item");
        for (std::size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = item[k];
      }
      return scope;
    };
    if (n.filter) {  // `for x in items if condition`: loop.* counts the kept items only
      std::vector<json> kept;
      for (const auto& item : list) {
        scopes_.push_back(bind(item));
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      list.swap(kept);
    }
    if (list.empty()) {
      run(n.otherwise, out);
      return;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      json scope = bind(list[i]);
      const auto count = static_cast<std::int64_t>(list.size()), index = static_cast<std::int64_t>(i);
      scope["loop"] = {{"index", index + 1},
                       {"index0", index},
                       {"first", i == 0},
                       {"last", i + 1 == list.size()},
                       {"length", count},
                       {"revindex", count - index},
                       {"revindex0", count - index - 1},
                       {"previtem", i > 0 ? list[i - 1] : undefined()},
                       {"nextitem", i + 1 < list.size() ? list[i + 1] : undefined()}};
      scopes_.push_back(std::move(scope));
      run(n.body, out);
      scopes_.pop_back();
    }
  }

  static std::int64_t as_int(const json& v) {
    if (v.is_number()) return v.get<std::int64_t>();
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    return 0;
  }

  json index(const json& value, const json& key) {
    if (value.is_array() && key.is_number_integer()) {
      auto i = key.get<std::int64_t>();
      if (i < 0) i += static_cast<std::int64_t>(value.size());
      if (i < 0 || i >= static_cast<std::int64_t>(value.size())) return undefined();
      return value[static_cast<std::size_t>(i)];
    }
    if (value.is_string() && key.is_number_integer()) {
      const auto& s = value.get_ref<const std::string&>();
      auto i = key.get<std::int64_t>();
      if (i < 0) i += static_cast<std::int64_t>(s.size());
      if (i < 0 || i >= static_cast<std::int64_t>(s.size())) return undefined();
      return std::string(1, s[static_cast<std::size_t>(i)]);
    }
    if (value.is_object() && key.is_string()) {
      auto it = value.find(key.get<std::string>());
      return it == value.end() ? undefined() : *it;
    }
    return undefined();
  }

  json method(const json& self, const std::string& name, const std::vector<json>& args) {
    if (self.is_string()) {
      const auto& s = self.get_ref<const std::string&>();
      const std::string chars = !args.empty() && args[0].is_string() ? args[0].get<std::string>() : " \t\r\n\f\v";
      auto left = [&] { return s.substr(std::min(s.find_first_not_of(chars), s.size())); };
      auto right = [&](const std::string& t) {
        const auto e = t.find_last_not_of(chars);
        return e == std::string::npos ? std::string() : t.substr(0, e + 1);
      };
      if (name == "strip") return right(left());
      if (name == "lstrip") return left();
      if (name == "rstrip") return right(s);
      if (name == "upper" || name == "lower") {
        std::string t = s;
        for (auto& c : t)
          c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
        return t;
      }
      if ((name == "startswith" || name == "endswith") && !args.empty() && args[0].is_string()) {
        const auto& p = args[0].get_ref<const std::string&>();
        if (p.size() > s.size()) return false;
        return name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
      }
      if (name == "split") {
        json parts = json::array();
        const std::string sep = !args.empty() && args[0].is_string() ? args[0].get<std::string>() : " ";
        std::size_t from = 0;
        for (auto at = s.find(sep, from); at != std::string::npos && !sep.empty(); at = s.find(sep, from)) {
          parts.push_back(s.substr(from, at - from));
          from = at + sep.size();
        }
        parts.push_back(s.substr(from));
        return parts;
      }
      if (name == "replace" && args.size() >= 2 && args[0].is_string() && args[1].is_string()) {
        std::string t = s;
        const auto& a = args[0].get_ref<const std::string&>();
        const auto& b = args[1].get_ref<const std::string&>();
        if (a.empty()) return t;
        for (auto at = t.find(a); at != std::string::npos; at = t.find(a, at + b.size())) t.replace(at, a.size(), b);
        return t;
      }
    }
    if (self.is_object()) {
      if (name == "get") {
        auto it = args.empty() || !args[0].is_string() ? self.end() : self.find(args[0].get<std::string>());
        return it != self.end() ? *it : (args.size() > 1 ? args[1] : json(nullptr));
      }
      if (name == "items") {
        json pairs = json::array();
        for (auto it = self.begin(); it != self.end(); ++it) pairs.push_back(json::array({it.key(), it.value()}));
        return pairs;
      }
      if (name == "keys" || name == "values") {
        json out = json::array();
        for (auto it = self.begin(); it != self.end(); ++it)
          out.push_back(name == "keys" ? json(it.key()) : it.value());
        return out;
      }
    }
    fail("unsupported method '" + name + "' on " + std::string(self.type_name()));
  }

  json filter(const std::string& name, const json& v, const std::vector<json>& args, const json& kwargs) {
    if (name == "trim") return method(v.is_string() ? v : json(to_text(v)), "strip", {});
    if (name == "length" || name == "count") {
      if (v.is_string()) return static_cast<std::int64_t>(v.get_ref<const std::string&>().size());
      return static_cast<std::int64_t>(v.is_array() || v.is_object() ? v.size() : 0);
    }
    if (name == "upper" || name == "lower") return method(json(to_text(v)), name, {});
    if (name == "string") return to_text(v);
    if (name == "tojson") {
      std::string out;
      const json indent = kwargs.value("indent", json(args.empty() ? json(nullptr) : args[0]));
      append_json_text(out, v, indent.is_number_integer() ? static_cast<int>(indent.get<std::int64_t>()) : -1, 0);
      return out;
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
      return select(name, v, args);
    if (name == "map") {
      json out = json::array();
      const bool by_attribute = kwargs.contains("attribute");
      if (!by_attribute && (args.empty() || !args[0].is_string())) fail("map needs attribute= or a filter name");
      if (v.is_array()) {
        for (const json& item : v) {
          if (!by_attribute) {
            out.push_back(filter(args[0].get<std::string>(), item, {args.begin() + 1, args.end()}, json::object()));
            continue;
          }
          json x = index(item, kwargs.at("attribute"));
          out.push_back(is_undefined(x) && kwargs.contains("default") ? kwargs.at("default") : x);
        }
      }
      return out;
    }
    if (name == "int")
      return v.is_string() ? json(std::strtoll(v.get<std::string>().c_str(), nullptr, 10)) : json(as_int(v));
    if (name == "list") return v.is_array() ? v : json::array();
    if (name == "first") return v.is_array() && !v.empty() ? v.front() : undefined();
    if (name == "last") return v.is_array() && !v.empty() ? v.back() : undefined();
    if (name == "default" || name == "d") {
      const bool use = is_undefined(v) || (args.size() > 1 && truthy(args[1]) && !truthy(v));
      return use ? (args.empty() ? json("") : args[0]) : v;
    }
    if (name == "join") {
      std::string out, sep = args.empty() ? "" : to_text(args[0]);
      if (v.is_array())
        for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + to_text(v[i]);
      return out;
    }
    if (name == "capitalize") {
      std::string t = method(json(to_text(v)), "lower", {}).get<std::string>();
      if (!t.empty()) t[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
      return t;
    }
    if (name == "items") return method(v, "items", {});
    fail("unsupported filter '" + name + "'");
  }

  // select / reject (items by a test, or by truth without one) and
  // selectattr / rejectattr (the same on one attribute of each item).
  json select(const std::string& name, const json& v, const std::vector<json>& args) {
    const bool by_attribute = name.ends_with("attr"), keep = name.starts_with("select");
    const std::size_t test_at = by_attribute ? 1 : 0;
    if (by_attribute && (args.empty() || !args[0].is_string())) fail(name + " needs an attribute name");
    if (args.size() > test_at && !args[test_at].is_string()) fail(name + ": the test must be given by name");
    json out = json::array();
    if (!v.is_array()) return out;
    for (const json& item : v) {
      const json subject = by_attribute ? index(item, args[0]) : item;
      const bool passes = args.size() > test_at
                              ? test(args[test_at].get<std::string>(), subject,
                                     {args.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, args.end()})
                              : truthy(subject);
      if (passes == keep) out.push_back(item);
    }
    return out;
  }

  bool test(const std::string& name, const json& v, const std::vector<json>& args) {
    if (name == "defined") return !is_undefined(v);
    if (name == "undefined") return is_undefined(v);
    if (name == "none") return v.is_null();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_number_integer();
    if (name == "float") return v.is_number_float();
    if (name == "boolean") return v.is_boolean();
    if (name == "true") return v.is_boolean() && v.get<bool>();
    if (name == "false") return v.is_boolean() && !v.get<bool>();
    if (name == "mapping") return v.is_object();
    if (name == "sequence" || name == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (name == "odd" || name == "even")
      return v.is_number_integer() && (v.get<std::int64_t>() % 2 != 0) == (name == "odd");
    if (name == "divisibleby" && !args.empty()) return as_int(args[0]) != 0 && as_int(v) % as_int(args[0]) == 0;
    if (name == "equalto" || name == "eq" || name == "==") return !args.empty() && v == args[0];
    if (name == "ne" || name == "!=") return !args.empty() && v != args[0];
    if (name == "in") return !args.empty() && truthy(binary("in", v, args[0]));
    fail("unsupported test '" + name + "'");
  }

  json binary(const std::string& op, const json& a, const json& b) {
    if (op == "~") return to_text(a) + to_text(b);
    if (op == "in") {
      if (b.is_string())
        return a.is_string() && b.get_ref<const std::string&>().find(a.get<std::string>()) != std::string::npos;
      if (b.is_array()) return std::find(b.begin(), b.end(), a) != b.end();
      if (b.is_object()) return a.is_string() && b.contains(a.get<std::string>());
      return false;
    }
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (op == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
      json out = a;
      out.insert(out.end(), b.begin(), b.end());
      return out;
    }
    if (!(a.is_number() || a.is_boolean()) || !(b.is_number() || b.is_boolean())) {
      if ((op == "<" || op == ">" || op == "<=" || op == ">=") && a.is_string() && b.is_string()) {
        const int c = a.get<std::string>().compare(b.get<std::string>());
        return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      }
      fail("cannot apply '" + op + "' to " + std::string(a.type_name()) + " and " + b.type_name());
    }
    const bool ints = (a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean());
    const double x = a.is_boolean() ? a.get<bool>() : a.get<double>(),
                 y = b.is_boolean() ? b.get<bool>() : b.get<double>();
    if (op == "<") return x < y;
    if (op == ">") return x > y;
    if (op == "<=") return x <= y;
    if (op == ">=") return x >= y;
    if (ints && op != "/") {
      const std::int64_t i = as_int(a), j = as_int(b);
      if (op == "+") return i + j;
      if (op == "-") return i - j;
      if (op == "*") return i * j;
      if (j == 0) fail("division by zero");
      if (op == "//") return i / j - ((i % j != 0) && ((i < 0) != (j < 0)) ? 1 : 0);
      if (op == "%") return ((i % j) + j) % j;
    }
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (y == 0) fail("division by zero");
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - y * std::floor(x / y);
    fail("unknown operator '" + op + "'");
  }

  // The arguments of a call, filter or test: every operand after the first.
  std::vector<json> operands(const Expr& e) {
    std::vector<json> args;
    for (const auto& a : e.args | std::views::drop(1)) args.push_back(eval(*a));
    return args;
  }

  json eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.value;
      case Expr::kName:
        return eval_name(e);
      case Expr::kList: {
        json out = json::array();
        for (const auto& a : e.args) out.push_back(eval(*a));
        return out;
      }
      case Expr::kDict: {
        json out = json::object();
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) out[to_text(eval(*e.args[i]))] = eval(*e.args[i + 1]);
        return out;
      }
      case Expr::kAttr:
        return index(eval(*e.args[0]), json(e.name));
      case Expr::kIndex:
        return index(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::kSlice:
        return eval_slice(e);
      case Expr::kCall:
        return eval_call(e);
      case Expr::kFilter: {
        json kwargs = json::object();
        for (const auto& [k, v] : e.kwargs) kwargs[k] = eval(*v);
        return filter(e.name, eval(*e.args[0]), operands(e), kwargs);
      }
      case Expr::kTest:
        return test(e.name, eval(*e.args[0]), operands(e)) != e.negated;
      case Expr::kUnary: {
        const json v = eval(*e.args[0]);
        return v.is_number_integer() ? json(-v.get<std::int64_t>()) : json(-v.get<double>());
      }
      case Expr::kBinary: {
        const json r = binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
        return e.negated ? json(!r.get<bool>()) : r;
      }
      case Expr::kAnd: {
        json a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::kOr: {
        json a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::kNot:
        return !truthy(eval(*e.args[0]));
      case Expr::kConditional:
        return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
    }
    return undefined();
  }

  json eval_name(const Expr& e) {
    if (const json* v = find(e.name)) return *v;
    // The global functions are defined (templates test `strftime_now is defined`).
    for (const char* f : {"raise_exception", "namespace", "range", "strftime_now"})
      if (e.name == f) return "<function " + e.name + ">";
    return undefined();
  }

  // value[from:to] of a string or list, Python's negative bounds included.
  json eval_slice(const Expr& e) {
    const json v = eval(*e.args[0]);
    const auto size = static_cast<std::int64_t>(v.is_string() ? v.get_ref<const std::string&>().size() : v.size());
    auto bound = [&](const ExprPtr& p, std::int64_t fallback) {
      if (!p) return fallback;
      auto i = as_int(eval(*p));
      if (i < 0) i += size;
      return std::clamp<std::int64_t>(i, 0, size);
    };
    const auto from = bound(e.args[1], 0), to = std::max(from, bound(e.args[2], size));
    if (v.is_string())
      return v.get<std::string>().substr(static_cast<std::size_t>(from), static_cast<std::size_t>(to - from));
    if (!v.is_array()) return undefined();
    return json(std::vector<json>(v.begin() + from, v.begin() + to));
  }

  // A method of a value, or one of the globals templates call.
  json eval_call(const Expr& e) {
    const auto args = operands(e);
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::kAttr) return method(eval(*callee.args[0]), callee.name, args);
    if (callee.kind != Expr::kName) fail("unsupported call");
    if (callee.name == "raise_exception")
      throw InputError(source_ + ": the template refused: " + (args.empty() ? "" : to_text(args[0])));
    if (callee.name == "namespace") {
      json ns = json::object();
      for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v);
      return ns;
    }
    if (callee.name == "range") return range(args);
    if (callee.name == "strftime_now") return strftime_now(args);
    fail("unsupported call");
  }

  json range(const std::vector<json>& args) {
    std::int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) stop = as_int(args[0]);
    if (args.size() >= 2) start = as_int(args[0]), stop = as_int(args[1]);
    if (args.size() >= 3) step = as_int(args[2]);
    if (step == 0 || std::abs((stop - start) / step) > 1000000) fail("range too large");
    json out = json::array();
    for (auto i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
    return out;
  }

  // transformers' global: datetime.now().strftime(format) (Llama 3.2 puts
  // "Today Date: 02 Dec 2026" into its system prompt).
  json strftime_now(const std::vector<json>& args) {
    if (args.size() != 1 || !args[0].is_string()) fail("strftime_now takes one format string");
    const auto format = args[0].get<std::string>();
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[256];
    const auto n = format.size() < 64 ? std::strftime(buffer, sizeof buffer, format.c_str(), &local) : 0;
    if (n == 0 && !format.empty()) fail("strftime_now: format '" + format + "' is empty or too long");
    return std::string(buffer, n);
  }

  std::vector<json> scopes_;
  std::string source_;
};

}  // namespace

struct ChatTemplate::Impl {
  std::string source;
  std::vector<Node> nodes;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(std::string_view text, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  impl->nodes = TemplateParser(split_tags(text, source), source).parse_all();
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::json& variables) const {
  std::string out;
  Renderer(variables.is_object() ? variables : nlohmann::json::object(), impl_->source).run(impl_->nodes, out);
  return out;
}

std::optional<ModelChatTemplate> load_chat_template(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  json config;
  try {
    config = json::parse(read_file(path, kMaxDocumentBytes));
  } catch (const json::exception& e) {
    throw InputError(path.string() + ": " + e.what());
  }
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const json& chat = config["chat_template"];
  std::string text;
  if (chat.is_string()) {
    text = chat.get<std::string>();
  } else if (chat.is_array()) {
    for (const auto& entry : chat)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        text = entry["template"].get<std::string>();
  }
  if (text.empty()) return std::nullopt;
  auto token = [&](const char* key) -> std::string {
    if (!config.contains(key)) return "";
    const json& t = config[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
    return "";
  };
  return ModelChatTemplate{ChatTemplate::parse(text, path.string() + ":chat_template"), token("bos_token"),
                           token("eos_token")};
}

}  // namespace fleet::text
