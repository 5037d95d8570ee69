package metrics

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// The login form: the token is sent once, by script, as a bearer header
// to GET /login, which answers with the session cookie; a form post would
// be the one request that is not a GET, and a GET form would put the token
// in the URL and the browser's history.
const (
	loginStyle = `body{font:16px system-ui,sans-serif;margin:0;padding:2em 1em;background:#f4f5f7;color:#1b1e23}` +
		`main{max-width:24em;margin:auto}input,button{font:inherit;padding:.5em;width:100%;box-sizing:border-box;margin:.3em 0}` +
		`#err{color:#b3261e;min-height:1.5em}code{font-size:.9em}`
	loginScript = `document.getElementById('f').addEventListener('submit',function(e){e.preventDefault();` +
		`var t=document.getElementById('t').value.trim(),m=document.getElementById('err');m.textContent='';` +
		`fetch('/login',{headers:{'Authorization':'Bearer '+t},credentials:'same-origin'}).then(function(r){` +
		`if(r.status===204){location.replace('/');return}` +
		`m.textContent=r.status===429?'Too many failed attempts: wait a minute.':'Wrong token.'})` +
		`.catch(function(){m.textContent='The gateway does not answer.'})})`
	loginHTML = `<!doctype html><html lang=en><head><meta charset=utf-8>` +
		`<meta name=viewport content="width=device-width,initial-scale=1"><title>fieldlink: token</title>` +
		`<style>` + loginStyle + `</style></head><body><main><h1>fieldlink status</h1>` +
		`<p>This page is open without a token on the gateway itself only. Enter the token of the file named by ` +
		`<code>metrics.token_file</code> (by default <code>status-token</code> beside the buffer file: ` +
		`<code>/var/lib/fieldlink/status-token</code> on a packaged gateway); ` +
		`this browser then stays signed in.</p>` +
		`<form id=f><input id=t type=password autocomplete=current-password placeholder=token required autofocus>` +
		`<button>Sign in</button></form><p id=err role=alert></p>` +
		`<noscript><p>Signing in needs JavaScript; or send the header <code>Authorization: Bearer &lt;token&gt;</code>.</p></noscript>` +
		`</main><script>` + loginScript + `</script></body></html>`
)

var loginCSP = "default-src 'none'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'; " +
	"script-src " + CSPHash(loginScript) + "; style-src " + CSPHash(loginStyle)

// CSPHash is the Content-Security-Policy source of an inline script or
// style: the page names what it inlines, and nothing else runs.
func CSPHash(inline string) string {
	h := sha256.Sum256([]byte(inline))
	return "'sha256-" + base64.StdEncoding.EncodeToString(h[:]) + "'"
}

func loginPage(w http.ResponseWriter, code int) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", loginCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(loginHTML))
}
