(function(){
var b=document.body,m=document.getElementById('main'),upd=document.getElementById('upd'),lost=document.getElementById('lost'),last=Date.now(),busy=false;
var cls={errors:'errors-only',raw:'show-raw'};
function query(){var p=[];for(var k in cls)if(b.classList.contains(cls[k]))p.push(k+'=1');return p.length?'?'+p.join('&'):''}
Object.keys(cls).forEach(function(k){var c=document.getElementById(k);if(!c)return;c.addEventListener('change',function(){b.classList.toggle(cls[k],c.checked);history.replaceState(null,'',location.pathname+query())})});
var go=document.getElementById('go');if(go)go.hidden=true;
function ago(){var s=Math.round((Date.now()-last)/1000);upd.textContent=s<2?'updated just now':'updated '+s+' s ago'}
function refresh(){if(busy||document.hidden)return;busy=true;
fetch('/?fragment=1',{credentials:'same-origin',cache:'no-store'}).then(function(r){
if(r.status===401){location.reload();return}if(!r.ok)throw new Error('HTTP '+r.status);return r.text()}).then(function(t){
if(t===undefined)return;m.innerHTML=t;last=Date.now();b.classList.remove('lost')}).catch(function(){
if(!b.classList.contains('lost')){lost.textContent='The gateway does not answer since '+new Date().toLocaleTimeString()+': what you see is from then.'}b.classList.add('lost')}).then(function(){busy=false;ago()})}
setInterval(refresh,5000);setInterval(ago,1000);ago();
document.addEventListener('visibilitychange',function(){if(!document.hidden)refresh()});
})();
