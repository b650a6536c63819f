// Renders /openapi.json with Redoc (redoc.standalone.js, served beside
// this file). Fonts are the system's: the page loads nothing from another
// origin, and its Content-Security-Policy would refuse it.
(function () {
  var system = '-apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';
  Redoc.init('/openapi.json', {
    expandResponses: '200,201,202',
    requiredPropsFirst: true,
    jsonSampleExpandLevel: 3,
    theme: {
      typography: {
        fontFamily: system,
        headings: { fontFamily: system },
        code: { fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace' }
      }
    }
  }, document.getElementById('reference'));
})();
